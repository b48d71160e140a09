-- call_begin: a worker takes the current attempt of a model call and starts its beat.
-- KEYS[1] call hash, KEYS[2] call beat key.
-- ARGV[1] attempt, ARGV[2] worker (host:pid), ARGV[3] beat ttl ms.
-- Returns the request JSON, or false when the attempt is not current, already begun or done.
-- access: write
-- KEYS: call_key, beat_key
-- ARGV: attempt, worker, beat_ttl_ms
local fields = redis.call('HMGET', KEYS[1], 'attempt', 'began', 'outcome', 'request')
if fields[1] ~= ARGV[1] or fields[2] or fields[3] then return false end
redis.call('HSET', KEYS[1], 'began', ARGV[1], 'worker', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
return fields[4]
