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
if tonumber(redis.call('GET', KEYS[5]) or '0') ~= tonumber(ARGV[2]) then return -1 end
local keep = tonumber(ARGV[1])
local last_seq = tonumber(redis.call('GET', KEYS[2]) or '0')

-- The oldest message some member has not read (its first inbox entry after its offset) or some
-- attempt has not acknowledged: nothing from it onwards may go. Inbox entries and records carry
-- the bus position (seq) to compare with the cap.
local floor_id, floor_seq = nil, nil
local function lower_floor(id, seq)
  if floor_seq == nil or seq < floor_seq then
    floor_id, floor_seq = id, seq
  end
end
for i = 6, #KEYS do
  local offset = redis.call('HGET', KEYS[3], ARGV[i - 3]) or '0-0'
  local first = redis.call('XRANGE', KEYS[i], '(' .. offset, '+', 'COUNT', 1)
  if #first > 0 then
    lower_floor(first[1][1], tonumber(first[1][2][2]))
  end
end
for _, raw in ipairs(redis.call('HVALS', KEYS[4])) do
  local record = cjson.decode(raw)
  lower_floor(record.ids[1], record.seq)
end

local removed
if floor_seq ~= nil and last_seq - floor_seq + 1 > keep then
  removed = redis.call('XTRIM', KEYS[1], 'MINID', floor_id)
else
  removed = redis.call('XTRIM', KEYS[1], 'MAXLEN', keep)
end

local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
for i = 6, #KEYS do
  if #head > 0 then
    redis.call('XTRIM', KEYS[i], 'MINID', head[1][1])
  else
    redis.call('XTRIM', KEYS[i], 'MAXLEN', 0)
  end
end
return removed
