-- call_finish: record a model call's outcome and wake the coordinator, once, and only from
-- the worker that began the current attempt: a stale worker's late reply is refused.
-- KEYS[1] call hash, KEYS[2] call beat key, KEYS[3] done list.
-- ARGV[1] attempt, ARGV[2] outcome JSON.
-- Returns 1 when recorded, 0 when refused.
-- access: write
-- KEYS: call_key, beat_key, done_key
-- ARGV: attempt, outcome
local fields = redis.call('HMGET', KEYS[1], 'attempt', 'began', 'outcome')
if fields[1] ~= ARGV[1] or fields[2] ~= ARGV[1] or fields[3] then return 0 end
redis.call('HSET', KEYS[1], 'outcome', ARGV[2])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[3], ARGV[1])
-- Only wake-ups (the coordinator re-reads the hash every second anyway): a short life, so a
-- late answer after the run's keys were given their expiry leaves nothing behind for good.
redis.call('PEXPIRE', KEYS[3], 60000)
return 1
