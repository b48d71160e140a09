-- create: write a normalized plan onto an empty board, with readiness settled as AI4J's first
-- refresh does: in plan order, each task's deps in order, the first missing or blocked one wins.
-- KEYS[1] order list, KEYS[2] ready zset, KEYS[3] counts hash, KEYS[4] events stream,
-- KEYS[5] unanswered zset, KEYS[6..] one task hash per plan task, in plan order.
-- ARGV[i] (i = 1..#tasks): the task as JSON {task_id, member_id, task, context, depends_on[]}.
-- Returns the number of tasks created, or an error if the board already exists.
-- uses: core, tasks
-- access: write
-- KEYS: order_key, ready_key, counts_key, events_key, unanswered_key, task_keys...
-- ARGV: tasks...
local order_key, ready_key, counts_key, events_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local unanswered_key = KEYS[5]
local task_keys_from = 6  -- KEYS[task_keys_from..]
local tasks_from = 1  -- ARGV[tasks_from..]
if redis.call('EXISTS', order_key) == 1 then return redis.error_reply('board already exists') end
local now = now_ms()
local pos_of, tasks, dependents, blocked = {}, {}, {}, {}
for i = tasks_from, #ARGV do
  local t = cjson.decode(ARGV[i])
  if type(t.depends_on) ~= 'table' then t.depends_on = {} end
  tasks[i] = t
  pos_of[t.task_id] = i
end
for i, t in ipairs(tasks) do
  for _, d in ipairs(t.depends_on) do
    if pos_of[d] then
      dependents[d] = dependents[d] or {}
      table.insert(dependents[d], t.task_id)
    end
  end
end

local function first_blocker(t)
  for _, d in ipairs(t.depends_on) do
    if pos_of[d] == nil then return 'Blocked: missing dependency.', 'missing dependency' end
    if blocked[d] then return 'Blocked: dependency failed.', 'dependency failed' end
  end
  return nil
end

for i, t in ipairs(tasks) do
  local key = KEYS[task_keys_from - 1 + i]
  redis.call('RPUSH', order_key, t.task_id)
  redis.call('HSET', key, 'task_id', t.task_id, 'member_id', t.member_id or '',
    'task', t.task or '', 'context', t.context or '', 'depends_on', table.concat(t.depends_on, ','),
    'dependents', table.concat(dependents[t.task_id] or {}, ','), 'pos', i,
    'deps_left', #t.depends_on, 'percent', 0, 'heartbeat_count', 0, 'attempts', 0, 'token', 0,
    'stale_writes', 0, 'updated_ms', now, 'claimed_by', '', 'worker', '', 'output', '',
    'error', '', 'requeue_reason', '')
  local detail, error_text = first_blocker(t)
  if detail then
    blocked[t.task_id] = true
    block(key, ready_key, counts_key, unanswered_key, nil, detail, error_text, now)
  elseif #t.depends_on == 0 then
    make_ready(key, ready_key, counts_key)
  else
    make_pending(key, counts_key)
  end
end

-- Later refreshes spread "dependency failed" to every pending dependent, transitively.
local queue = {}
for tid in pairs(blocked) do table.insert(queue, tid) end
while #queue > 0 do
  local tid = table.remove(queue)
  for _, dep_id in ipairs(dependents[tid] or {}) do
    local key = KEYS[task_keys_from - 1 + pos_of[dep_id]]
    if redis.call('HGET', key, 'status') == 'pending' then
      block(key, ready_key, counts_key, unanswered_key, nil, 'Blocked: dependency failed.',
        'dependency failed', now)
      table.insert(queue, dep_id)
    end
  end
end
event(events_key, '', 'created', 0)
return #tasks
