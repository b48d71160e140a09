-- call_start: a new attempt of one of the coordinator's model calls (its request replaces any
-- earlier one); a worker still holding an older attempt can no longer begin, beat or finish it.
-- With an expected attempt it is a compare-and-set: nothing changes when the current attempt
-- moved on or already has its outcome (a retry racing the answer must not discard it).
-- KEYS[1] call hash, KEYS[2] call beat key.
-- ARGV[1] request JSON, ARGV[2] the attempt the caller saw as current ('' = whatever it is).
-- Returns the new attempt number, or 0 when the compare-and-set refused.
-- access: write
-- KEYS: call_key, beat_key
-- ARGV: request, seen_attempt
if ARGV[2] ~= '' then
  local fields = redis.call('HMGET', KEYS[1], 'attempt', 'outcome')
  if (fields[1] or '0') ~= ARGV[2] or fields[2] then return 0 end
end
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HSET', KEYS[1], 'request', ARGV[1])
redis.call('HDEL', KEYS[1], 'began', 'worker', 'outcome')
redis.call('DEL', KEYS[2])
return attempt
