-- run_signal: tell a run's coordinator something (a stop, a plan decision) and wake it, in one
-- step. Keys this creates inherit the state hash's TTL, so a signal that races the run's end
-- and expiry (shared/runs/retention.py) cannot leave keys that never expire.
-- KEYS[1] state hash, KEYS[2] cancel key, KEYS[3] events stream, KEYS[4] approval list.
-- ARGV[1] stop reason ('' = wake only; the first reason given is kept), ARGV[2] what ('stop',
-- 'approval'), ARGV[3] the wake-up's task id ('': not a task change).
-- access: write
-- KEYS: state_key, cancel_key, events_key, approval_key
-- ARGV: reason, what, task_id
local state_key, cancel_key, events_key, approval_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local reason, what, task_id = ARGV[1], ARGV[2], ARGV[3]
if reason ~= '' then redis.call('SET', cancel_key, reason, 'NX') end
redis.call('XADD', events_key, '*', 'task_id', task_id, 'status', 'run.' .. what, 'token', '0')
redis.call('RPUSH', approval_key, what)
local ttl = redis.call('PTTL', state_key)
if ttl > 0 then
  for i = 2, 4 do
    if redis.call('PTTL', KEYS[i]) == -1 then redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
return 'ok'
