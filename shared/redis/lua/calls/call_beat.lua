-- call_beat: keep a begun model call's attempt alive while its worker waits on the model.
-- KEYS[1] call hash, KEYS[2] call beat key.
-- ARGV[1] attempt, ARGV[2] beat ttl ms.
-- Returns 'ok' when extended, 'stale' when the attempt is no longer current or already has its
-- outcome.
-- access: write
-- KEYS: call_key, beat_key
-- ARGV: attempt, beat_ttl_ms
local call_key, beat_key = KEYS[1], KEYS[2]
local attempt, beat_ttl_ms = ARGV[1], ARGV[2]
local fields = redis.call('HMGET', call_key, 'attempt', 'began', 'outcome')
if fields[1] ~= attempt or fields[2] ~= attempt or fields[3] then return 'stale' end
redis.call('SET', beat_key, attempt, 'PX', beat_ttl_ms)
return 'ok'
