-- read_unread: take a member's messages after its read offset and advance the offset in the same
-- step, so concurrent readers of one member never get the same message twice or skip one.
-- A reader that is a task's attempt (ARGV[3]) also records what it took, under
-- '<member>:<task>', until ack_reads drops the record once the attempt's model has been given the
-- messages. A record left by an earlier attempt of the task (another token: it was lost or
-- released before its model saw them) is delivered again, first, and passes to this attempt.
-- KEYS[1] the member's inbox stream, KEYS[2] read offsets hash, KEYS[3] bus stream,
-- KEYS[4] unacknowledged reads hash.
-- ARGV[1] member id, ARGV[2] max messages to take, ARGV[3] the reading attempt's task id
-- ('' = not an attempt: nothing to acknowledge), ARGV[4] that attempt's claim token.
-- Returns {number of inbox entries consumed, bus entries as XRANGE returns them}; a message gone
-- from the bus (deleted by hand) is skipped.
-- A record is JSON: {token, ids (bus ids, in order), seq (bus position of the first, for trim)}.

local function add_bus_entries(ids, into)
  for _, id in ipairs(ids) do
    local entry = redis.call('XRANGE', KEYS[3], id, id)
    if #entry > 0 then into[#into + 1] = entry[1] end
  end
end

-- A hash a first read creates after the run ended gets the bus's expiry (shared/runs/retention.py).
local function expire_with_bus(key)
  local ttl = redis.call('PTTL', KEYS[3])
  if ttl > 0 and redis.call('PTTL', key) == -1 then redis.call('PEXPIRE', key, ttl) end
end

local field = ARGV[1] .. ':' .. ARGV[3]
local record, recorded = nil, false
if ARGV[3] ~= '' then
  local raw = redis.call('HGET', KEYS[4], field)
  if raw then record, recorded = cjson.decode(raw), true end
end
local messages = {}
if record and record.token ~= ARGV[4] then
  add_bus_entries(record.ids, messages)
  record.token = ARGV[4]
end

local offset = redis.call('HGET', KEYS[2], ARGV[1])
local refs = redis.call('XRANGE', KEYS[1], '(' .. (offset or '0-0'), '+', 'COUNT', ARGV[2])
local taken = {}
for i, ref in ipairs(refs) do taken[i] = ref[1] end
add_bus_entries(taken, messages)
if #refs > 0 then
  redis.call('HSET', KEYS[2], ARGV[1], refs[#refs][1])
  if not offset then expire_with_bus(KEYS[2]) end
  if ARGV[3] ~= '' then
    record = record or {token = ARGV[4], ids = {}, seq = tonumber(refs[1][2][2])}
    for _, id in ipairs(taken) do record.ids[#record.ids + 1] = id end
  end
end
if record then
  redis.call('HSET', KEYS[4], field, cjson.encode(record))
  if not recorded then expire_with_bus(KEYS[4]) end
end
return {#refs, messages}
