-- task_waiting: say on a task what its attempt waits for (a provider's rate slot or pause), or
-- clear it; only the attempt whose claim token still holds the task may.
-- KEYS[1] the task hash.
-- ARGV[1] the claim token, ARGV[2] the model ('' clears), ARGV[3] since (epoch ms),
-- ARGV[4] until (epoch ms).
-- Returns 1 when written, 0 when the token no longer holds the task.
-- uses: tasks
-- access: write
-- KEYS: task_key
-- ARGV: token, model, since_ms, until_ms
if check_token(KEYS[1], ARGV[1]) ~= APPLIED then return 0 end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'waiting_model', 'waiting_since_ms', 'waiting_until_ms')
else
  redis.call('HSET', KEYS[1], 'waiting_model', ARGV[2], 'waiting_since_ms', ARGV[3],
             'waiting_until_ms', ARGV[4])
end
return 1
