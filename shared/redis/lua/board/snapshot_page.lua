-- snapshot_page: one page of a board's task hashes, each read whole or only the fields named,
-- and where the board's events stream stood meanwhile, so the caller can tell which tasks
-- changed between pages and read those again (a whole board in one call would block Redis for
-- as long as it is big).
-- KEYS[1] events stream, KEYS[2..] the page's task hashes in plan order.
-- ARGV[1] the most bytes of field values to return: the page stops at the first task past it
-- (at least one task is read); ARGV[2..] the fields to read (none: every field).
-- Returns {last events entry id ('' when none), tasks read, then one flat HGETALL reply per task
-- read, of the fields named that it has (empty for a task that does not exist)}.
-- access: read
-- KEYS: events_key, task_keys...
-- ARGV: max_bytes, fields...
local events_key = KEYS[1]
local task_keys_from = 2  -- KEYS[task_keys_from..]
local max_bytes = ARGV[1]
local fields_from = 2  -- ARGV[fields_from..]
local budget = tonumber(max_bytes)
local fields = {}
for i = fields_from, #ARGV do fields[#fields + 1] = ARGV[i] end

local function read(key)
  if #fields == 0 then return redis.call('HGETALL', key) end
  local values = redis.call('HMGET', key, unpack(fields))
  local flat = {}
  for j, name in ipairs(fields) do
    if values[j] then
      flat[#flat + 1] = name
      flat[#flat + 1] = values[j]
    end
  end
  return flat
end

local last = redis.call('XREVRANGE', events_key, '+', '-', 'COUNT', 1)
local out = {last[1] and last[1][1] or '', 0}
local used = 0
for i = task_keys_from, #KEYS do
  if i > 2 and used >= budget then break end
  local flat = read(KEYS[i])
  for j = 2, #flat, 2 do used = used + #flat[j] end
  out[#out + 1] = flat
end
out[2] = #out - 2
return out
