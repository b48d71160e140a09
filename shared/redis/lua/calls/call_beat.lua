-- call_beat: keep a begun model call's attempt alive while its worker waits on the model.
-- KEYS[1] call hash, KEYS[2] call beat key.
-- ARGV[1] attempt, ARGV[2] beat ttl ms.
-- Returns 1 when extended, 0 when the attempt is no longer current or already has its outcome.
-- access: write
-- KEYS: call_key, beat_key
-- ARGV: attempt, beat_ttl_ms
local fields = redis.call('HMGET', KEYS[1], 'attempt', 'began', 'outcome')
if fields[1] ~= ARGV[1] or fields[2] ~= ARGV[1] or fields[3] then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
