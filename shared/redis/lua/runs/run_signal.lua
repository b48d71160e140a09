-- run_signal: tell a run's coordinator something (a stop, a plan decision) and wake it, in one
-- step. Keys this creates inherit the state hash's TTL, so a signal that races the run's end
-- and expiry (shared/runs/retention.py) cannot leave keys that never expire.
-- KEYS[1] state hash, KEYS[2] cancel key, KEYS[3] events stream, KEYS[4] approval list.
-- ARGV[1] stop reason ('' = wake only; the first reason given is kept), ARGV[2] what ('stop',
-- 'approval'), ARGV[3] the wake-up's task id ('': not a task change).
-- access: write
-- KEYS: state_key, cancel_key, events_key, approval_key
-- ARGV: reason, what, task_id
if ARGV[1] ~= '' then redis.call('SET', KEYS[2], ARGV[1], 'NX') end
redis.call('XADD', KEYS[3], '*', 'task_id', ARGV[3], 'status', 'run.' .. ARGV[2], 'token', '0')
redis.call('RPUSH', KEYS[4], ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  for i = 2, 4 do
    if redis.call('PTTL', KEYS[i]) == -1 then redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
return 1
