-- snapshot_page: one page of a board's task hashes, each read whole, and where the board's
-- events stream stood meanwhile, so the caller can tell which tasks changed between pages and
-- read those again (a whole board in one call would block Redis for as long as it is big).
-- KEYS[1] events stream, KEYS[2..] the page's task hashes in plan order.
-- ARGV[1] the most bytes of field values to return: the page stops at the first task past it
-- (at least one task is read).
-- Returns {last events entry id ('' when none), tasks read, then one flat HGETALL reply per task
-- read (empty for a task that does not exist)}.
-- access: read
-- KEYS: events_key, task_keys...
-- ARGV: max_bytes
local events_key = KEYS[1]
local task_keys_from = 2  -- KEYS[task_keys_from..]
local max_bytes = ARGV[1]
local budget = tonumber(max_bytes)
local last = redis.call('XREVRANGE', events_key, '+', '-', 'COUNT', 1)
local out = {last[1] and last[1][1] or '', 0}
local used = 0
for i = task_keys_from, #KEYS do
  if i > 2 and used >= budget then break end
  local flat = redis.call('HGETALL', KEYS[i])
  for j = 2, #flat, 2 do used = used + #flat[j] end
  out[#out + 1] = flat
end
out[2] = #out - 2
return out
