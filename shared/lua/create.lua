-- create: write a normalized plan onto an empty board.
-- KEYS[1] order list, KEYS[2] ready zset, KEYS[3] counts hash, KEYS[4] events stream,
-- KEYS[5..] one task hash per plan task, in plan order.
-- ARGV[i] (i = 1..#tasks): the task as JSON {task_id, member_id, task, context, depends_on[]}.
-- Returns the number of tasks created, or an error if the board already exists.
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.error_reply('board already exists') end
local now = now_ms()
local pos_of = {}
local tasks = {}
for i = 1, #ARGV do
  local t = cjson.decode(ARGV[i])
  tasks[i] = t
  pos_of[t.task_id] = i
end
local dependents = {}
for i, t in ipairs(tasks) do
  local key = KEYS[4 + i]
  local deps = t.depends_on or {}
  local missing = false
  for _, d in ipairs(deps) do
    if pos_of[d] == nil then missing = true
    else
      dependents[d] = dependents[d] or {}
      table.insert(dependents[d], t.task_id)
    end
  end
  redis.call('RPUSH', KEYS[1], t.task_id)
  redis.call('HSET', key, 'task_id', t.task_id, 'member_id', t.member_id or '', 'task', t.task or '',
    'context', t.context or '', 'depends_on', table.concat(deps, ','), 'pos', i,
    'deps_left', #deps, 'status', 'pending', 'phase', 'pending', 'detail', 'Waiting for dependencies.',
    'percent', 0, 'heartbeat_count', 0, 'attempts', 0, 'token', 0, 'stale_writes', 0,
    'updated_ms', now, 'claimed_by', '', 'worker', '', 'output', '', 'error', '')
  redis.call('HINCRBY', KEYS[3], 'pending', 1)
  if missing then
    set_status(key, KEYS[3], 'blocked')
    redis.call('HSET', key, 'phase', 'blocked', 'detail', 'Blocked: missing dependency.',
      'error', 'missing dependency', 'percent', 100, 'end_ms', now)
  elseif #deps == 0 then
    make_ready(key, KEYS[2], KEYS[3], 'Ready for dispatch.')
  end
end
-- Spread "dependency failed" from tasks blocked by a missing dependency, transitively.
local queue = {}
for i, t in ipairs(tasks) do
  if redis.call('HGET', KEYS[4 + i], 'status') == 'blocked' then table.insert(queue, t.task_id) end
end
while #queue > 0 do
  local tid = table.remove(queue, 1)
  for _, dep_id in ipairs(dependents[tid] or {}) do
    local key = KEYS[4 + pos_of[dep_id]]
    if redis.call('HGET', key, 'status') == 'pending' then
      set_status(key, KEYS[3], 'blocked')
      redis.call('HSET', key, 'phase', 'blocked', 'detail', 'Blocked: dependency failed.',
        'error', 'dependency failed', 'percent', 100, 'end_ms', now)
      table.insert(queue, dep_id)
    end
  end
end
for i, t in ipairs(tasks) do
  redis.call('HSET', KEYS[4 + i], 'dependents', table.concat(dependents[t.task_id] or {}, ','))
end
event(KEYS[4], '', 'created', 0)
return #tasks
