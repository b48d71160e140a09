-- task_waiting: say on a task what its attempt waits for (a provider's rate slot or pause), or
-- clear it; only the attempt whose claim token still holds the task may.
-- KEYS[1] the task hash.
-- ARGV[1] the claim token, ARGV[2] the model ('' clears), ARGV[3] since (epoch ms),
-- ARGV[4] until (epoch ms).
-- Returns 'ok' when written, 'stale' when the token no longer holds the task.
-- uses: tasks
-- access: write
-- KEYS: task_key
-- ARGV: token, model, since_ms, until_ms
local task_key = KEYS[1]
local token, model, since_ms, until_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if check_token(task_key, token) ~= OK then return 'stale' end
if model == '' then
  redis.call('HDEL', task_key, 'waiting_model', 'waiting_since_ms', 'waiting_until_ms')
else
  redis.call('HSET', task_key, 'waiting_model', model, 'waiting_since_ms', since_ms,
             'waiting_until_ms', until_ms)
end
return 'ok'
