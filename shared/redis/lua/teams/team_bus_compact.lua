-- team_bus_compact: cut a team's bus back towards ARGV[1] messages past an old unread message of
-- the lead. trim_bus.lua can only cut the bus's oldest end (XTRIM), so one message a lead never
-- reads (a peer's or a protocol message: they never fold) would keep everything after it; this
-- deletes, oldest first, the messages after it that no reader still needs (each reader that
-- gets one has read it), with their inbox entries, and keeps the rest.
-- Bounded: it spends at most ARGV[3] units of work (a bus entry walked or an entry deleted is
-- one; a broadcast is deleted from every inbox) from the record's `compacted_to`, which moves
-- past the entries it deleted and the lead's unread ones (the lead reads in order, so once read
-- they go with trim_bus's cut), never past a teammate's unread message (walked again next time).
-- KEYS[1] bus stream, KEYS[2] read offsets hash, KEYS[3] unacknowledged reads hash, KEYS[4]
-- roster version counter, KEYS[5] the lead inbox record, KEYS[6..] the inbox stream of every
-- member on the roster of version ARGV[2], then the lead's.
-- ARGV[1] messages to keep, ARGV[2] the roster version the caller listed the members by,
-- ARGV[3] units of work, ARGV[4..] the member ids ('lead' last), in KEYS order.
-- Returns {messages deleted, bus length after, 1 if `compacted_to` moved else 0}, or {-1, 0, 0}
-- without a change when the roster has changed since (a member missing from the list could
-- lose an unread message).
-- uses: streams
-- access: upkeep
-- KEYS: bus_key, offsets_key, unacked_key, roster_version_key, lead_record_key, inbox_keys...
-- ARGV: keep, roster_version, work_units, members...
local bus_key, offsets_key, unacked_key, roster_version_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lead_record_key = KEYS[5]
local inbox_keys_from = 6  -- KEYS[inbox_keys_from..]
local keep, roster_version, work_units = ARGV[1], ARGV[2], ARGV[3]
local members_from = 4  -- ARGV[members_from..]
if tonumber(redis.call('GET',
  roster_version_key) or '0') ~= tonumber(roster_version) then return {-1, 0, 0} end
local keep = tonumber(keep)
local length = redis.call('XLEN', bus_key)
-- What an attempt read but has not acknowledged may be delivered again: not compacted around.
if length <= keep or redis.call('HLEN', unacked_key) > 0 then return {0, length, 0} end

local inbox_of, offset_of = {}, {}
local readers = {}
for i = members_from, #ARGV do
  inbox_of[ARGV[i]] = KEYS[i + 2]
  readers[#readers + 1] = ARGV[i]
end
local offsets = redis.call('HMGET', offsets_key, unpack(readers))
-- The lowest teammate offset: a broadcast after it may be unread by a teammate.
local oldest_mate = nil
for i, member in ipairs(readers) do
  local offset = offsets[i] or '0-0'
  offset_of[member] = offset
  if member ~= 'lead' and (oldest_mate == nil or stream_id_after(oldest_mate, offset)) then
    oldest_mate = offset
  end
end

local start = redis.call('HGET', lead_record_key, 'compacted_to') or '0-0'
local cursor = start
local budget = tonumber(work_units)
local entries = redis.call('XRANGE', bus_key, '(' .. cursor, '+', 'COUNT', budget)
local removed, advance = 0, true
for _, entry in ipairs(entries) do
  if length - removed <= keep or budget <= 0 then break end
  budget = budget - 1
  local id = entry[1]
  local fields = entry_fields(entry[2])
  local to = fields.to or ''
  local for_mate, for_lead, inboxes = false, false, {}
  if to == '' or to == '*' then
    for_mate = oldest_mate ~= nil and stream_id_after(id, oldest_mate)
    for_lead = fields.from ~= 'lead' and stream_id_after(id, offset_of['lead'])
    inboxes = readers
  elseif inbox_of[to] then
    for_lead = to == 'lead' and stream_id_after(id, offset_of[to])
    for_mate = to ~= 'lead' and stream_id_after(id, offset_of[to])
    inboxes = {to}
  end  -- else delivered to no inbox: nobody reads it from one
  if for_mate then
    advance = false
  elseif not for_lead then
    if #inboxes > budget then break end  -- a broadcast too big for what is left: next call
    redis.call('XDEL', bus_key, id)
    for _, member in ipairs(inboxes) do redis.call('XDEL', inbox_of[member], id) end
    budget = budget - #inboxes
    removed = removed + 1
  end
  if advance then cursor = id end
end
redis.call('HSET', lead_record_key, 'compacted_to', cursor)
local moved = 0
if cursor ~= start then moved = 1 end
return {removed, length - removed, moved}
