-- create_commit: make a board out of the task hashes create_page wrote: its order list, ready
-- and unanswered indexes and counts, and the 'created' event, in one step (readers see the
-- whole plan or none).
-- KEYS[1] order list, KEYS[2] ready zset, KEYS[3] counts hash, KEYS[4] events stream,
-- KEYS[5] unanswered zset.
-- ARGV[1] n, how many tasks; ARGV[2] r, how many are ready; ARGV[3] b, how many are blocked;
-- ARGV[4..n+3] the task ids in plan order; then r (plan position, id) pairs, the ready tasks;
-- then b such pairs, the blocked tasks; then (status, count) pairs.
-- Returns n, or an error if the board already exists.
-- uses: tasks
-- access: write
-- KEYS: order_key, ready_key, counts_key, events_key, unanswered_key
-- ARGV: task_count, ready_count, blocked_count, page...
local order_key, ready_key, counts_key, events_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local unanswered_key = KEYS[5]
local task_count, ready_count, blocked_count = ARGV[1], ARGV[2], ARGV[3]
local page_from = 4  -- ARGV[page_from..]
if redis.call('EXISTS', order_key) == 1 then return redis.error_reply('board already exists') end
local n, r, b = tonumber(task_count), tonumber(ready_count), tonumber(blocked_count)
local CHUNK = 1000  -- unpack() of a few thousand values at once overflows Lua's C stack
local function in_chunks(command, key, first, last, step)
  for from = first, last, CHUNK * step do
    redis.call(command, key, unpack(ARGV, from, math.min(from + CHUNK * step - 1, last)))
  end
end
local ready_from = page_from + n
local blocked_from = ready_from + 2 * r
in_chunks('RPUSH', order_key, page_from, ready_from - 1, 1)
if r > 0 then in_chunks('ZADD', ready_key, ready_from, blocked_from - 1, 2) end
if b > 0 then in_chunks('ZADD', unanswered_key, blocked_from, blocked_from + 2 * b - 1, 2) end
for j = blocked_from + 2 * b, #ARGV, 2 do
  redis.call('HINCRBY', counts_key, ARGV[j], tonumber(ARGV[j + 1]))
end
event(events_key, '', 'created', 0)
return n
