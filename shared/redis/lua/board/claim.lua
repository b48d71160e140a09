-- claim: move a ready task to in_progress, issue a fencing token, start the heartbeat key.
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] token counter, KEYS[6] heartbeat key, KEYS[7] events stream.
-- ARGV[1] member id ('' = the task's member), ARGV[2] worker (host:pid), ARGV[3] heartbeat ttl ms.
-- Returns {token, dependents csv} (the caller needs the dependents to complete), or
-- {0, ''} when the task is not ready.
-- uses: core, tasks
-- access: write
-- KEYS: task_key, ready_key, running_key, counts_key, tokens_key, heartbeat_key, events_key
-- ARGV: member, worker, heartbeat_ttl_ms
if redis.call('HGET', KEYS[1], 'status') ~= 'ready' then return {0, ''} end
local now = now_ms()
local member = ARGV[1]
if member == '' then member = redis.call('HGET', KEYS[1], 'member_id') end
local who = member
if who == '' then who = 'member' end
local token = fencing_token(KEYS[5])
local tid = redis.call('HGET', KEYS[1], 'task_id')
set_status(KEYS[1], KEYS[4], 'in_progress')
redis.call('ZREM', KEYS[2], tid)
redis.call('SADD', KEYS[3], tid)
inherit_ttl(KEYS[3], KEYS[1])
redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSET', KEYS[1], 'claimed_by', member, 'worker', ARGV[2], 'token', token,
  'heartbeat_ttl_ms', ARGV[3], 'start_ms', now, 'last_heartbeat_ms', now, 'updated_ms', now,
  'end_ms', 0, 'duration_ms', 0, 'phase', 'running', 'detail', 'Claimed by ' .. who .. '.',
  'heartbeat_count', 0, 'output', '', 'error', '')
raise_percent(KEYS[1], 15)
redis.call('SET', KEYS[6], token, 'PX', ARGV[3])
task_event(KEYS[7], KEYS[1], 'in_progress', token)
return {token, redis.call('HGET', KEYS[1], 'dependents')}
