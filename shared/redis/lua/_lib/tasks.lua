-- tasks: a task hash's state changes, shared by the board and the team task board. Task
-- hashes hold flat string fields; shared/board.py lists them.
-- uses: core

-- Verdicts of a token-checked write, mapped to WriteOutcome in shared/board.py: words, as every
-- script answers, so MONITOR and SLOWLOG read them as they are.
local OK, STALE, CONFLICT, UNKNOWN = 'ok', 'stale', 'conflict', 'unknown'

local function set_status(task_key, counts_key, new_status)
  local old = redis.call('HGET', task_key, 'status')
  if old then redis.call('HINCRBY', counts_key, old, -1) end
  redis.call('HINCRBY', counts_key, new_status, 1)
  redis.call('HSET', task_key, 'status', new_status)
end

local function raise_percent(task_key, floor)
  local p = tonumber(redis.call('HGET', task_key, 'percent') or '0')
  if p < floor then redis.call('HSET', task_key, 'percent', floor) end
end

local function event(events_key, task_id, status, token)
  redis.call('XADD', events_key, 'MAXLEN', '~', 10000, '*',
    'task_id', task_id, 'status', status, 'token', tostring(token or 0))
end

-- A task's state change, with who holds it (else its planned member), the worker process
-- holding the claim (host:pid, '' when none: a requeue clears it first) and its attempts as of
-- this change: a reader following the stream sees each transition as it was, not as the task
-- hash reads later (`teamctl tasks --follow`, `teamctl events`, the dashboard's timeline, which
-- draws an attempt on the lane of the worker its claim names).
local function task_event(events_key, task_key, status, token)
  local f = redis.call('HMGET', task_key, 'task_id', 'claimed_by', 'member_id', 'attempts',
    'worker')
  local member = f[2]
  if not member or member == '' then member = f[3] or '' end
  redis.call('XADD', events_key, 'MAXLEN', '~', 10000, '*',
    'task_id', f[1] or '', 'status', status, 'token', tostring(token or 0),
    'member_id', member, 'attempts', f[4] or '0', 'worker', f[5] or '')
end

-- Is `token` the live claim on the task? A stale token is counted on the task (stale_writes);
-- the live token of a task that already ended is a conflict (its holder writing twice).
local function check_token(task_key, token)
  local current = redis.call('HMGET', task_key, 'token', 'status')
  if not current[2] then return UNKNOWN end
  if current[1] ~= token or token == '0' then
    redis.call('HINCRBY', task_key, 'stale_writes', 1)
    return STALE
  end
  if current[2] ~= 'in_progress' then return CONFLICT end
  return OK
end

-- A team task's ready lane (shared/keys.py ready_for/ready_role/ready_open): the key its hash
-- names in `lane`, set when it was added. The lane is a key of the task's own space (the same
-- hash tag, so the same cluster slot); scripts that move a task in or out of ready reach it
-- through the hash rather than each caller reading and passing it. A planned task has none.
local function task_lane(task_key)
  local lane = redis.call('HGET', task_key, 'lane')
  if lane and lane ~= '' then return lane end
  return nil
end

local function leave_lane(task_key, tid)
  local lane = task_lane(task_key)
  if lane then redis.call('ZREM', lane, tid) end
end

local function make_ready(task_key, ready_key, counts_key)
  local detail = 'Dependencies satisfied.'
  if redis.call('HGET', task_key, 'depends_on') == '' then detail = 'Ready for dispatch.' end
  set_status(task_key, counts_key, 'ready')
  redis.call('HSET', task_key, 'phase', 'ready', 'detail', detail, 'error', '')
  raise_percent(task_key, 5)
  local pos, tid = tonumber(redis.call('HGET', task_key, 'pos')),
    redis.call('HGET', task_key, 'task_id')
  redis.call('ZADD', ready_key, pos, tid)
  inherit_ttl(ready_key, task_key)
  local lane = task_lane(task_key)
  if lane then redis.call('ZADD', lane, pos, tid) end
end

local function make_pending(task_key, counts_key)
  set_status(task_key, counts_key, 'pending')
  redis.call('HSET', task_key, 'phase', 'pending', 'detail', 'Waiting for dependencies.',
    'error', '')
end

-- A task that failed or was blocked joins the board's unanswered index (shared/keys.py),
-- scored by plan position, so a status read lists those of a big board without reading it all:
-- one entry per move, never a walk. No task leaves either status. A team's board keeps no index
-- (unanswered_key nil).
local function mark_unanswered(unanswered_key, task_key)
  if not unanswered_key then return end
  local f = redis.call('HMGET', task_key, 'pos', 'task_id')
  redis.call('ZADD', unanswered_key, tonumber(f[1]) or 0, f[2])
  inherit_ttl(unanswered_key, task_key)
end

local function block(task_key, ready_key, counts_key, unanswered_key, events_key, detail,
                     error_text, now)
  local tid = redis.call('HGET', task_key, 'task_id')
  redis.call('ZREM', ready_key, tid)
  leave_lane(task_key, tid)
  set_status(task_key, counts_key, 'blocked')
  mark_unanswered(unanswered_key, task_key)
  redis.call('HSET', task_key, 'phase', 'blocked', 'detail', detail, 'error', error_text,
    'percent', 100, 'end_ms', now, 'updated_ms', now)
  if events_key then task_event(events_key, task_key, 'blocked', 0) end
end

-- Block every pending/ready task among KEYS[first..last] (a dependents closure).
local function block_dependents(first, last, ready_key, counts_key, unanswered_key, events_key,
                                now)
  for i = first, last do
    local status = redis.call('HGET', KEYS[i], 'status')
    if status == 'pending' or status == 'ready' then
      block(KEYS[i], ready_key, counts_key, unanswered_key, events_key,
        'Blocked: dependency failed.', 'dependency failed', now)
    end
  end
end

-- End a claim without a result: no live token, no holder, times reset (AI4J release/timeout),
-- then back to ready or pending by the dependencies still open. A team task's claim has no
-- heartbeat key (hb_key nil): its teammate's turn holds it. `reclaimed` is cleared: only
-- reclaim.lua sets it (the attempt died), whatever `reason` says, since a reason may quote a
-- model.
local function requeue(task_key, ready_key, running_key, counts_key, hb_key, reason, now)
  redis.call('SREM', running_key, redis.call('HGET', task_key, 'task_id'))
  if hb_key then redis.call('DEL', hb_key) end
  redis.call('HSET', task_key, 'token', 0, 'claimed_by', '', 'worker', '', 'start_ms', 0,
    'last_heartbeat_ms', 0, 'end_ms', 0, 'duration_ms', 0, 'output', '', 'updated_ms', now,
    'requeue_reason', reason, 'reclaimed', 0)
  if tonumber(redis.call('HGET', task_key, 'deps_left')) <= 0 then
    make_ready(task_key, ready_key, counts_key)
  else
    make_pending(task_key, counts_key)
  end
end

-- The end of a release: the claim ends without a result (requeue) and the stream says
-- 'released' with the token given back (0 for a release the runtime makes).
local function release_claim(task_key, ready_key, running_key, counts_key, hb_key, events_key,
                             token, reason, now)
  requeue(task_key, ready_key, running_key, counts_key, hb_key, reason, now)
  task_event(events_key, task_key, 'released', token)
end

-- Mark a held task completed with its output, out of the running set, and wake its dependents:
-- each of `dependent_keys` whose last open dependency this was becomes ready. The caller checked
-- the claim, and announces the result and writes the task event. Returns the ids made ready.
local function complete_task(task_key, ready_key, running_key, counts_key, dependent_keys,
                             output, detail, duration_ms, now)
  set_status(task_key, counts_key, 'completed')
  redis.call('HSET', task_key, 'phase', 'completed', 'detail', detail, 'percent', 100,
    'output', output, 'error', '', 'duration_ms', duration_ms, 'end_ms', now,
    'last_heartbeat_ms', now, 'updated_ms', now)
  redis.call('SREM', running_key, redis.call('HGET', task_key, 'task_id'))
  local ready = {}
  for _, dependent_key in ipairs(dependent_keys) do
    local left = redis.call('HINCRBY', dependent_key, 'deps_left', -1)
    if left <= 0 and redis.call('HGET', dependent_key, 'status') == 'pending' then
      make_ready(dependent_key, ready_key, counts_key)
      ready[#ready + 1] = redis.call('HGET', dependent_key, 'task_id')
    end
  end
  return ready
end
