-- call_begin: a worker takes the current attempt of a model call and starts its beat.
-- KEYS[1] call hash, KEYS[2] call beat key.
-- ARGV[1] attempt, ARGV[2] worker (host:pid), ARGV[3] beat ttl ms.
-- Returns the request JSON, or false when the attempt is not current, already begun or done.
-- access: write
-- KEYS: call_key, beat_key
-- ARGV: attempt, worker, beat_ttl_ms
local call_key, beat_key = KEYS[1], KEYS[2]
local attempt, worker, beat_ttl_ms = ARGV[1], ARGV[2], ARGV[3]
local fields = redis.call('HMGET', call_key, 'attempt', 'began', 'outcome', 'request')
if fields[1] ~= attempt or fields[2] or fields[3] then return false end
redis.call('HSET', call_key, 'began', attempt, 'worker', worker)
redis.call('SET', beat_key, attempt, 'PX', beat_ttl_ms)
return fields[4]
