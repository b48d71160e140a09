-- reassign: hand a live claim to another member. The task stays in progress and the token stays
-- valid: the worker holding it keeps executing on the new member's behalf.
-- KEYS[1] task hash, KEYS[2] heartbeat key, KEYS[3] events stream.
-- ARGV[1] token, ARGV[2] the member taking over.
-- Returns 1 applied, -1 stale token (counted in stale_writes), -2 the claim already ended,
-- 0 no such task.
-- uses: core, tasks
-- access: write
-- KEYS: task_key, heartbeat_key, events_key
-- ARGV: token, member
local verdict = check_token(KEYS[1], ARGV[1])
if verdict ~= APPLIED then return verdict end
local now = now_ms()
local from = redis.call('HGET', KEYS[1], 'claimed_by')
if from == '' then from = 'member' end
redis.call('HSET', KEYS[1], 'claimed_by', ARGV[2], 'last_heartbeat_ms', now, 'updated_ms', now,
  'phase', 'reassigned', 'detail', 'Reassigned from ' .. from .. ' to ' .. ARGV[2] .. '.')
-- AI4J counts a reassignment as a sign of life: renew the heartbeat key with the claim's ttl.
redis.call('SET', KEYS[2], ARGV[1], 'PX', redis.call('HGET', KEYS[1], 'heartbeat_ttl_ms'))
task_event(KEYS[3], KEYS[1], 'reassigned', ARGV[1])
return APPLIED
