-- team: a team's task board (shared/teams/tasks.py), its teammates' claims and what they are
-- told. A team's task hashes are the board's, plus role (''), reminded ('1' once the holder was
-- reminded) and released_from (the teammate a reminder release took it from); member_id is the
-- assignee, task the subject, context the description.
-- uses: core, tasks

-- Whether a teammate in plan mode still waits for its plan's approval (it cannot take tasks).
local function plan_gated(mate_key)
  local state = redis.call('HGET', mate_key, 'plan_state') or ''
  return state ~= '' and state ~= 'approved'
end

-- Can teammate `name` (of `role`) take the task now? It must be ready; an assignee reserves it,
-- otherwise the role must match (case-insensitively) or the task names none. `auto` (a claim the
-- runtime makes for it) also skips a task released from this teammate for not finishing it.
local function team_task_fits(task_key, name, role, auto)
  local f = redis.call('HMGET', task_key, 'status', 'member_id', 'role', 'released_from')
  if f[1] ~= 'ready' then return false end
  if auto and f[4] == name then return false end
  if f[2] and f[2] ~= '' then return f[2] == name end
  return (f[3] or '') == '' or string.lower(f[3]) == string.lower(role or '')
end

-- Claim a ready task for teammate `name`: in progress, owned by it, a fresh fencing token, no
-- heartbeat key (its turn lease is the liveness). Returns the task id.
local function team_claim(task_key, ready_key, running_key, counts_key, tokens_key, events_key,
                          name, now)
  local token = fencing_token(tokens_key)
  local tid = redis.call('HGET', task_key, 'task_id')
  set_status(task_key, counts_key, 'in_progress')
  redis.call('ZREM', ready_key, tid)
  leave_lane(task_key, tid)
  redis.call('SADD', running_key, tid)
  redis.call('HINCRBY', task_key, 'attempts', 1)
  redis.call('HSET', task_key, 'claimed_by', name, 'worker', '', 'token', token,
    'heartbeat_ttl_ms', 0, 'start_ms', now, 'last_heartbeat_ms', now, 'updated_ms', now,
    'end_ms', 0, 'duration_ms', 0, 'phase', 'running', 'detail', 'Claimed by ' .. name .. '.',
    'heartbeat_count', 0, 'output', '', 'error', '', 'reminded', '0')
  raise_percent(task_key, 15)
  task_event(events_key, task_key, 'in_progress', token)
  return tid
end

-- Give a teammate's task back to the board (ready again, or pending) with the reason.
local function team_release(task_key, ready_key, running_key, counts_key, events_key, reason, now)
  release_claim(task_key, ready_key, running_key, counts_key, nil, events_key, 0, reason, now)
  redis.call('HSET', task_key, 'reminded', '0')
end

-- Whether KEYS[first..last] still name exactly the tasks of the running set. The caller read
-- them before the script: a claim, completion or release since then means it reads them again
-- (the script returns 'retry', writing nothing), so no task is missed by a snapshot taken a
-- moment too early.
local function snapshot_current(set_key, first, last)
  if redis.call('SCARD', set_key) ~= last - first + 1 then return false end
  for i = first, last do
    local tid = redis.call('HGET', KEYS[i], 'task_id')
    if not tid or redis.call('SISMEMBER', set_key, tid) == 0 then return false end
  end
  return true
end

-- Whether the ready lanes KEYS[first_lane..last_lane] still begin with tasks among the
-- candidates KEYS[first_candidate..] the caller read: for each lane, its first ARGV[depth_arg..]
-- entries (as many as the caller read of it) must all be candidates, so no task that became
-- ready in between is passed over. Returns nil when one is not (the caller reads again), else
-- whether some lane holds more than was read of it. A candidate no longer ready leaves its
-- lane here, so lanes never fill with tasks that went elsewhere.
local function lane_heads_current(first_lane, last_lane, depth_arg, first_candidate)
  local known = {}
  for i = first_candidate, #KEYS do
    local f = redis.call('HMGET', KEYS[i], 'task_id', 'status')
    if f[1] then
      known[f[1]] = true
      if f[2] ~= 'ready' then leave_lane(KEYS[i], f[1]) end
    end
  end
  local deeper = false
  for i = first_lane, last_lane do
    local depth = tonumber(ARGV[depth_arg + i - first_lane])
    for _, tid in ipairs(redis.call('ZRANGE', KEYS[i], 0, depth - 1)) do
      if not known[tid] then return nil end
    end
    if redis.call('ZCARD', KEYS[i]) > depth then deeper = true end
  end
  return deeper
end

-- The task hashes among KEYS[first..last] that teammate `name` holds (in progress, its claim).
local function team_held(first, last, name)
  local held = {}
  for i = first, last do
    local f = redis.call('HMGET', KEYS[i], 'status', 'claimed_by')
    if f[1] == 'in_progress' and f[2] == name then held[#held + 1] = KEYS[i] end
  end
  return held
end

-- What a teammate is told when a task is claimed for it (a task.assigned message).
local function team_task_text(task_key)
  local f = redis.call('HMGET', task_key, 'task_id', 'task', 'context')
  local text = 'You now hold ' .. f[1] .. ' from the team task board: ' .. f[2]
  if f[3] and f[3] ~= '' then text = text .. '\n' .. f[3] end
  return text .. '\nDo it, then call complete_task(task_id="' .. f[1] .. '", result=...) with '
    .. 'what you produced.'
end
