-- team_task_add: add task_<n> to a team's board (ready, or pending on open dependencies), its id
-- listed among each dependency's dependents, in one step. The caller read task_seq and names the
-- next id; a concurrent add makes this one retry, so ids have no gaps and every key is declared.
-- KEYS[1] task_seq counter, KEYS[2] order list, KEYS[3] ready zset, KEYS[4] counts hash,
-- KEYS[5] events stream, KEYS[6] the new task hash, KEYS[7] its ready lane (by assignee, else
-- role, else open: shared/keys.py), KEYS[8..] the dependencies' task hashes.
-- ARGV[1] task_seq as read ('0' when unset), ARGV[2] the new id (task_<ARGV[1] + 1>),
-- ARGV[3] subject, ARGV[4] description, ARGV[5] role ('' = any), ARGV[6] assignee ('' = none),
-- ARGV[7] max releases (turn_end.lua fails the task rather than release it once more),
-- ARGV[8..] the dependency ids, in the order of KEYS[8..].
-- Returns {'ok', status} (ready or pending), {'retry', ''} (task_seq moved: read it again) or
-- {'unknown', id} (no such dependency); only 'ok' writes.
-- uses: core, tasks
-- access: write
-- KEYS: seq_key, order_key, ready_key, counts_key, events_key, task_key, lane_key,
--   dependency_keys...
-- ARGV: seq, task_id, subject, description, role, assignee, max_releases, dependency_ids...
local seq_key, order_key, ready_key, counts_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local events_key, task_key, lane_key = KEYS[5], KEYS[6], KEYS[7]
local dependency_keys_from = 8  -- KEYS[dependency_keys_from..]
local seq, task_id, subject, description, role = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local assignee, max_releases = ARGV[6], ARGV[7]
local dependency_ids_from = 8  -- ARGV[dependency_ids_from..]
if (redis.call('GET', seq_key) or '0') ~= seq then return {'retry', ''} end
for i = dependency_keys_from, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then return {'unknown', ARGV[i]} end
end
local now = now_ms()
local position = redis.call('INCR', seq_key)
local tid = task_id
local deps, left = {}, 0
for i = dependency_keys_from, #KEYS do
  deps[#deps + 1] = ARGV[i]
  if redis.call('HGET', KEYS[i], 'status') ~= 'completed' then left = left + 1 end
  local dependents = redis.call('HGET', KEYS[i], 'dependents') or ''
  if dependents ~= '' then dependents = dependents .. ',' end
  redis.call('HSET', KEYS[i], 'dependents', dependents .. tid)
end
redis.call('RPUSH', order_key, tid)
redis.call('HSET', task_key, 'task_id', tid, 'member_id', assignee, 'task', subject,
  'context', description, 'role', role, 'depends_on', table.concat(deps, ','), 'dependents', '',
  'pos', position, 'deps_left', left, 'percent', 0, 'heartbeat_count', 0, 'attempts', 0,
  'token', 0, 'stale_writes', 0, 'updated_ms', now, 'claimed_by', '', 'worker', '',
  'output', '', 'error', '', 'requeue_reason', '', 'reminded', '0', 'released_from', '',
  'releases', 0, 'released_by', '', 'max_releases', max_releases, 'lane', lane_key)
if left == 0 then make_ready(task_key, ready_key, counts_key) else make_pending(task_key,
  counts_key) end
task_event(events_key, task_key, 'created', 0)
return {'ok', redis.call('HGET', task_key, 'status')}
