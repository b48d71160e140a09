-- call_start: a new attempt of one of the coordinator's model calls (its request replaces any
-- earlier one); a worker still making an older attempt can no longer begin, beat or finish it.
-- KEYS[1] call hash, KEYS[2] call beat key.
-- ARGV[1] request JSON.
-- Returns the new attempt number.
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HSET', KEYS[1], 'request', ARGV[1])
redis.call('HDEL', KEYS[1], 'began', 'worker', 'outcome')
redis.call('DEL', KEYS[2])
return attempt
