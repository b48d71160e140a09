-- read_unread: take a member's messages after its read offset and advance the offset in the same
-- step, so concurrent readers of one member never get the same message twice or skip one.
-- A reader that is a task's attempt (ARGV[3]) also records what it took, under
-- '<member>:<task>', until ack_reads drops the record once the attempt's model has been given the
-- messages. A record left by an earlier attempt of the task (another token: it was lost or
-- released before its model saw them) is delivered again, first, and passes to this attempt.
-- With a budget (ARGV[5]) a read takes only the messages whose views fit it (at least one), the
-- rest staying unread for the next read; a record's messages too (its `given` counts how many of
-- them this attempt has been given).
-- KEYS[1] the member's inbox stream, KEYS[2] read offsets hash, KEYS[3] bus stream,
-- KEYS[4] unacknowledged reads hash.
-- ARGV[1] member id, ARGV[2] max messages to take, ARGV[3] the reading attempt's task id
-- ('' = not an attempt: nothing to acknowledge), ARGV[4] that attempt's claim token,
-- ARGV[5] the characters the messages' JSON views may fill ('' = no bound).
-- Returns {number of inbox entries consumed, bus entries as XRANGE returns them, messages of the
-- record still to give this attempt, the member's read offset after}; a message gone from the bus
-- (deleted by hand) is skipped.
-- A record is JSON: {token, ids (bus ids, in order), seq (bus position of the first, for trim),
-- given (how many of ids the token's attempt was given; absent: all)}.
-- access: write
-- KEYS: inbox_key, offsets_key, bus_key, unacked_key
-- ARGV: member, max_messages, task_id, token, view_budget
local inbox_key, offsets_key, bus_key, unacked_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member, max_messages, task_id, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local view_budget = ARGV[5]

local VIEW_CHARS = 80
-- The characters a message's view takes beside its fields' text: its keys, quotes, separators.

-- How many characters a message's view takes as JSON, at most (only while it may fit: the
-- script scans no more text than the budget). `flat` is its bus entry's fields. Bytes count
-- (a character is one or more), and each control character, quote or backslash five more (an
-- escape takes two or six), in one pass. Returns nil when its bytes alone exceed `room`:
-- it does not fit, or it is the first, taken whatever its size (nothing else fits after it).
local function view_chars(flat, room)
  local texts, bytes = {}, VIEW_CHARS
  for i = 2, #flat, 2 do
    local key = flat[i - 1]
    if key == 'from' or key == 'to' or key == 'type' or key == 'task_id'
       or key == 'content' then
      texts[#texts + 1] = flat[i]
      bytes = bytes + #flat[i]
    end
  end
  if bytes > room then return nil end
  local size = bytes
  for _, text in ipairs(texts) do
    local _, special = string.gsub(text, '[%c"\\]', '')
    size = size + 5 * special
  end
  return size
end

local budget = tonumber(view_budget)
local used, taken_count = 0, 0
-- Whether a bus entry's view still fits the budget (the first always does); counts it if so.
local function fits(entry)
  if not budget then return true end
  local size = view_chars(entry[2], budget - used)
  if taken_count > 0 and (size == nil or used + size > budget) then return false end
  used, taken_count = used + (size or budget), taken_count + 1
  return true
end

-- The bus entry of message `id`, or nil when it left the bus.
local function bus_entry(id)
  local entry = redis.call('XRANGE', bus_key, id, id)
  if #entry > 0 then return entry[1] end
  return nil
end

-- A hash a first read creates after the run ended gets the bus's expiry (shared/runs/retention.py).
local function expire_with_bus(key)
  local ttl = redis.call('PTTL', bus_key)
  if ttl > 0 and redis.call('PTTL', key) == -1 then redis.call('PEXPIRE', key, ttl) end
end

local field = member .. ':' .. task_id
local record, recorded = nil, false
if task_id ~= '' then
  local raw = redis.call('HGET', unacked_key, field)
  if raw then record, recorded = cjson.decode(raw), true end
end
local messages = {}
local full = false
if record then
  if record.token ~= token then record.token, record.given = token, 0 end
  record.given = record.given or #record.ids
  while record.given < #record.ids do
    local entry = bus_entry(record.ids[record.given + 1])
    if entry then
      if not fits(entry) then full = true break end
      messages[#messages + 1] = entry
    end
    record.given = record.given + 1
  end
end

local offset = redis.call('HGET', offsets_key, member)
local consumed = 0
if not full then
  local refs = redis.call('XRANGE', inbox_key, '(' .. (offset or '0-0'), '+', 'COUNT', max_messages)
  local taken = {}
  for _, ref in ipairs(refs) do
    local entry = bus_entry(ref[1])
    if entry then
      if not fits(entry) then break end
      messages[#messages + 1] = entry
    end
    taken[#taken + 1] = ref[1]
  end
  consumed = #taken
  if consumed > 0 then
    redis.call('HSET', offsets_key, member, taken[consumed])
    if not offset then expire_with_bus(offsets_key) end
    offset = taken[consumed]
    if task_id ~= '' then
      record = record or {token = token, ids = {}, seq = tonumber(refs[1][2][2]), given = 0}
      for _, id in ipairs(taken) do record.ids[#record.ids + 1] = id end
      record.given = #record.ids
    end
  end
end
if record then
  redis.call('HSET', unacked_key, field, cjson.encode(record))
  if not recorded then expire_with_bus(unacked_key) end
end
local owed = 0
if record then owed = #record.ids - record.given end
return {consumed, messages, owed, offset or ''}
