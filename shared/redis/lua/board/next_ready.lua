-- next_ready: the first n ready task ids in plan order (AI4J nextReadyTasks; n <= 0 means 1).
-- KEYS[1] ready zset. ARGV[1] n.
-- Returns the task ids.
-- access: read
-- KEYS: ready_key
-- ARGV: n
local ready_key = KEYS[1]
local n = ARGV[1]
local n = tonumber(n)
if n <= 0 then n = 1 end
return redis.call('ZRANGE', ready_key, 0, n - 1)
