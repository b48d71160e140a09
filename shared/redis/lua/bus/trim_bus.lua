-- trim_bus: cut the bus down to ARGV[1] messages without dropping any message that some member
-- has not read yet, or that an attempt read but has not acknowledged (read_unread may deliver it
-- again), then drop the inbox entries whose message left the bus (all of them read).
-- KEYS[1] bus stream, KEYS[2] bus sequence counter, KEYS[3] read offsets hash,
-- KEYS[4] unacknowledged reads hash, KEYS[5] roster version counter, KEYS[6..] the inbox stream
-- of every member on the roster of version ARGV[2] (and the lead's, on a team bus).
-- ARGV[1] messages to keep, ARGV[2] the roster version the caller listed the members by,
-- ARGV[3..] the member ids, in the order of their inboxes in KEYS.
-- Returns the number of messages removed from the bus, or -1 without trimming when the roster
-- has changed since (a member missing from the list could lose an unread message).
-- access: write
-- KEYS: bus_key, bus_seq_key, offsets_key, unacked_key, roster_version_key, inbox_keys...
-- ARGV: keep, roster_version, members...
local bus_key, bus_seq_key, offsets_key, unacked_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local roster_version_key = KEYS[5]
local inbox_keys_from = 6  -- KEYS[inbox_keys_from..]
local keep, roster_version = ARGV[1], ARGV[2]
local members_from = 3  -- ARGV[members_from..]
if tonumber(redis.call('GET',
  roster_version_key) or '0') ~= tonumber(roster_version) then return -1 end
local keep = tonumber(keep)
local last_seq = tonumber(redis.call('GET', bus_seq_key) or '0')

-- The oldest message some member has not read (its first inbox entry after its offset) or some
-- attempt has not acknowledged: nothing from it onwards may go. Inbox entries and records carry
-- the bus position (seq) to compare with the cap.
local floor_id, floor_seq = nil, nil
local function lower_floor(id, seq)
  if floor_seq == nil or seq < floor_seq then
    floor_id, floor_seq = id, seq
  end
end
for i = inbox_keys_from, #KEYS do
  local offset = redis.call('HGET', offsets_key, ARGV[i - 3]) or '0-0'
  local first = redis.call('XRANGE', KEYS[i], '(' .. offset, '+', 'COUNT', 1)
  if #first > 0 then
    lower_floor(first[1][1], tonumber(first[1][2][2]))
  end
end
for _, raw in ipairs(redis.call('HVALS', unacked_key)) do
  local record = cjson.decode(raw)
  lower_floor(record.ids[1], record.seq)
end

local removed
if floor_seq ~= nil and last_seq - floor_seq + 1 > keep then
  removed = redis.call('XTRIM', bus_key, 'MINID', floor_id)
else
  removed = redis.call('XTRIM', bus_key, 'MAXLEN', keep)
end

local head = redis.call('XRANGE', bus_key, '-', '+', 'COUNT', 1)
for i = inbox_keys_from, #KEYS do
  if #head > 0 then
    redis.call('XTRIM', KEYS[i], 'MINID', head[1][1])
  else
    redis.call('XTRIM', KEYS[i], 'MAXLEN', 0)
  end
end
return removed
