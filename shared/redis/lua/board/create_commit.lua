-- create_commit: make a board out of the task hashes create_page wrote: its order list, ready
-- index and counts, and the 'created' event, in one step (readers see the whole plan or none).
-- KEYS[1] order list, KEYS[2] ready zset, KEYS[3] counts hash, KEYS[4] events stream.
-- ARGV[1] n, how many tasks; ARGV[2] r, how many are ready; ARGV[3..n+2] the task ids in plan
-- order; then r (plan position, id) pairs, the ready tasks; then (status, count) pairs.
-- Returns n, or an error if the board already exists.
-- uses: tasks
-- access: write
-- KEYS: order_key, ready_key, counts_key, events_key
-- ARGV: task_count, ready_count, page...
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.error_reply('board already exists') end
local n, r = tonumber(ARGV[1]), tonumber(ARGV[2])
local CHUNK = 1000  -- unpack() of a few thousand values at once overflows Lua's C stack
local function in_chunks(command, key, first, last, step)
  for from = first, last, CHUNK * step do
    redis.call(command, key, unpack(ARGV, from, math.min(from + CHUNK * step - 1, last)))
  end
end
in_chunks('RPUSH', KEYS[1], 3, n + 2, 1)
if r > 0 then in_chunks('ZADD', KEYS[2], n + 3, n + 2 + 2 * r, 2) end
for j = n + 3 + 2 * r, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[3], ARGV[j], tonumber(ARGV[j + 1]))
end
event(KEYS[4], '', 'created', 0)
return n
