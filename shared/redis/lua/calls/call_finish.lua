-- call_finish: record a model call's outcome and wake the coordinator, once, and only from
-- the worker that began the current attempt: a stale worker's late reply is refused.
-- KEYS[1] call hash, KEYS[2] call beat key, KEYS[3] done list.
-- ARGV[1] attempt, ARGV[2] outcome JSON.
-- Returns 'ok' when recorded, 'stale' when refused.
-- access: write
-- KEYS: call_key, beat_key, done_key
-- ARGV: attempt, outcome
local call_key, beat_key, done_key = KEYS[1], KEYS[2], KEYS[3]
local attempt, outcome = ARGV[1], ARGV[2]
local fields = redis.call('HMGET', call_key, 'attempt', 'began', 'outcome')
if fields[1] ~= attempt or fields[2] ~= attempt or fields[3] then return 'stale' end
redis.call('HSET', call_key, 'outcome', outcome)
redis.call('DEL', beat_key)
redis.call('RPUSH', done_key, attempt)
-- Only wake-ups (the coordinator re-reads the hash every second anyway): a short life, so a
-- late answer after the run's keys were given their expiry leaves nothing behind for good.
redis.call('PEXPIRE', done_key, 60000)
return 'ok'
