-- reassign: hand a live claim to another member. The task stays in progress and the token stays
-- valid: the worker holding it keeps executing on the new member's behalf.
-- KEYS[1] task hash, KEYS[2] heartbeat key, KEYS[3] events stream.
-- ARGV[1] token, ARGV[2] the member taking over.
-- Returns 'ok' (applied), 'stale' (a stale token, counted in stale_writes), 'conflict' (the
-- claim already ended) or 'unknown' (no such task).
-- uses: core, tasks
-- access: write
-- KEYS: task_key, heartbeat_key, events_key
-- ARGV: token, member
local task_key, heartbeat_key, events_key = KEYS[1], KEYS[2], KEYS[3]
local token, member = ARGV[1], ARGV[2]
local verdict = check_token(task_key, token)
if verdict ~= OK then return verdict end
local now = now_ms()
local from = redis.call('HGET', task_key, 'claimed_by')
if from == '' then from = 'member' end
redis.call('HSET', task_key, 'claimed_by', member, 'last_heartbeat_ms', now, 'updated_ms', now,
  'phase', 'reassigned', 'detail', 'Reassigned from ' .. from .. ' to ' .. member .. '.')
-- AI4J counts a reassignment as a sign of life: renew the heartbeat key with the claim's ttl.
redis.call('SET', heartbeat_key, token, 'PX', redis.call('HGET', task_key, 'heartbeat_ttl_ms'))
task_event(events_key, task_key, 'reassigned', token)
return OK
