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
local task_key, ready_key, running_key, counts_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local tokens_key, heartbeat_key, events_key = KEYS[5], KEYS[6], KEYS[7]
local member, worker, heartbeat_ttl_ms = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', task_key, 'status') ~= 'ready' then return {0, ''} end
local now = now_ms()
if member == '' then member = redis.call('HGET', task_key, 'member_id') end
local who = member
if who == '' then who = 'member' end
local token = fencing_token(tokens_key)
local tid = redis.call('HGET', task_key, 'task_id')
set_status(task_key, counts_key, 'in_progress')
redis.call('ZREM', ready_key, tid)
redis.call('SADD', running_key, tid)
inherit_ttl(running_key, task_key)
redis.call('HINCRBY', task_key, 'attempts', 1)
redis.call('HSET', task_key, 'claimed_by', member, 'worker', worker, 'token', token,
  'heartbeat_ttl_ms', heartbeat_ttl_ms, 'start_ms', now, 'last_heartbeat_ms', now, 'updated_ms',
    now,
  'end_ms', 0, 'duration_ms', 0, 'phase', 'running', 'detail', 'Claimed by ' .. who .. '.',
  'heartbeat_count', 0, 'output', '', 'error', '')
raise_percent(task_key, 15)
redis.call('SET', heartbeat_key, token, 'PX', heartbeat_ttl_ms)
task_event(events_key, task_key, 'in_progress', token)
return {token, redis.call('HGET', task_key, 'dependents')}
