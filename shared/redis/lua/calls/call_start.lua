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
local call_key, beat_key = KEYS[1], KEYS[2]
local request, seen_attempt = ARGV[1], ARGV[2]
if seen_attempt ~= '' then
  local fields = redis.call('HMGET', call_key, 'attempt', 'outcome')
  if (fields[1] or '0') ~= seen_attempt or fields[2] then return 0 end
end
local attempt = redis.call('HINCRBY', call_key, 'attempt', 1)
redis.call('HSET', call_key, 'request', request)
redis.call('HDEL', call_key, 'began', 'worker', 'outcome')
redis.call('DEL', beat_key)
return attempt
