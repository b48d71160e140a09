-- mate_waiting: say on a teammate's record what its turn's call waits for (a provider's rate
-- slot or pause), or clear it; only the turn whose lease token still holds the teammate may.
-- KEYS[1] the teammate's hash.
-- ARGV[1] the turn's token, ARGV[2] the model ('' clears), ARGV[3] since (epoch ms),
-- ARGV[4] until (epoch ms).
-- Returns 'ok' when written, 'stale' when the token no longer holds the teammate.
-- access: write
-- KEYS: mate_key
-- ARGV: token, model, since_ms, until_ms
local mate_key = KEYS[1]
local token, model, since_ms, until_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('HGET', mate_key, 'turn_token') ~= token then return 'stale' end
if model == '' then
  redis.call('HDEL', mate_key, 'waiting_model', 'waiting_since_ms', 'waiting_until_ms')
else
  redis.call('HSET', mate_key, 'waiting_model', model, 'waiting_since_ms', since_ms,
             'waiting_until_ms', until_ms)
end
return 'ok'
