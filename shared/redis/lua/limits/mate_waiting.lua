-- mate_waiting: say on a teammate's record what its turn's call waits for (a provider's rate
-- slot or pause), or clear it; only the turn whose lease token still holds the teammate may.
-- KEYS[1] the teammate's hash.
-- ARGV[1] the turn's token, ARGV[2] the model ('' clears), ARGV[3] since (epoch ms),
-- ARGV[4] until (epoch ms).
-- Returns 1 when written, 0 when the token no longer holds the teammate.
-- access: write
-- KEYS: mate_key
-- ARGV: token, model, since_ms, until_ms
if redis.call('HGET', KEYS[1], 'turn_token') ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'waiting_model', 'waiting_since_ms', 'waiting_until_ms')
else
  redis.call('HSET', KEYS[1], 'waiting_model', ARGV[2], 'waiting_since_ms', ARGV[3],
             'waiting_until_ms', ARGV[4])
end
return 1
