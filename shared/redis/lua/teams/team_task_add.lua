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
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then return {'retry', ''} end
for i = 8, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then return {'unknown', ARGV[i]} end
end
local now = now_ms()
local position = redis.call('INCR', KEYS[1])
local tid = ARGV[2]
local deps, left = {}, 0
for i = 8, #KEYS do
  deps[#deps + 1] = ARGV[i]
  if redis.call('HGET', KEYS[i], 'status') ~= 'completed' then left = left + 1 end
  local dependents = redis.call('HGET', KEYS[i], 'dependents') or ''
  if dependents ~= '' then dependents = dependents .. ',' end
  redis.call('HSET', KEYS[i], 'dependents', dependents .. tid)
end
redis.call('RPUSH', KEYS[2], tid)
redis.call('HSET', KEYS[6], 'task_id', tid, 'member_id', ARGV[6], 'task', ARGV[3],
  'context', ARGV[4], 'role', ARGV[5], 'depends_on', table.concat(deps, ','), 'dependents', '',
  'pos', position, 'deps_left', left, 'percent', 0, 'heartbeat_count', 0, 'attempts', 0,
  'token', 0, 'stale_writes', 0, 'updated_ms', now, 'claimed_by', '', 'worker', '',
  'output', '', 'error', '', 'requeue_reason', '', 'reminded', '0', 'released_from', '',
  'releases', 0, 'released_by', '', 'max_releases', ARGV[7], 'lane', KEYS[7])
if left == 0 then make_ready(KEYS[6], KEYS[3], KEYS[4]) else make_pending(KEYS[6], KEYS[4]) end
task_event(KEYS[5], KEYS[6], 'created', 0)
return {'ok', redis.call('HGET', KEYS[6], 'status')}
