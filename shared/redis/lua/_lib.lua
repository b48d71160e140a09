-- Shared helpers, prepended to every script when it is loaded (Redis 6.2 has no FUNCTIONs).
-- Task hashes hold flat string fields; shared/board.py lists them. Helpers touch only keys their
-- caller received through KEYS.

-- Verdicts of a token-checked write, mapped to WriteOutcome in shared/board.py.
local APPLIED, STALE, CONFLICT, MISSING = 1, -1, -2, 0

-- Run statuses that end a run (RunStatus.finished in shared/runs/run_records.py).
local RUN_ENDED = {completed = true, failed = true, cancelled = true}

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A fencing token: the next value of `counter_key`, '@', and this server's epoch. A failover can
-- lose the last acknowledged writes (replication is asynchronous), the counter's latest values
-- among them, so the promoted replica would issue a token again that a cut-off holder still
-- has. The epoch changes whenever that can happen: master_replid is new on every promotion and
-- run_id on every restart (a restart may lose writes too), so a token from before is never
-- equal to one after, while within an epoch the counter alone orders them. Read inside the
-- script, so the epoch is the server's that applies the claim. (The alternative, WAIT for a
-- replica before a claim is acknowledged, costs a replication round trip per claim and still
-- loses to a failover to a replica it did not wait for: bench/bench_failover.py.)
local function fencing_token(counter_key)
  local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  local epoch = string.sub(redis.sha1hex(run_id .. replid), 1, 12)
  return redis.call('INCR', counter_key) .. '@' .. epoch
end

-- --- Memories (turn_checkpoint.lua, lead_checkpoint.lua) ---------------------------------------
-- A memory list holds chat messages as JSON. Beside it a size record (hash fields
-- <prefix>chars and <prefix>last_user) keeps the characters of all its JSON texts and the index
-- of its last user message, updated on every append and drop, so a checkpoint costs what it
-- appends and drops, never a walk of the whole memory.
local MEMORY_SCAN_BATCH = 16

-- Characters (code points) of a UTF-8 text: its bytes less its continuation bytes.
local function text_chars(text)
  local _, continuations = string.gsub(text, '[\128-\191]', '')
  return #text - continuations
end

local function is_user_message(raw)
  local ok, message = pcall(cjson.decode, raw)
  return ok and type(message) == 'table' and message.role == 'user'
end

-- The size record of `list_key`; without one (a memory written before it existed, or reset by a
-- re-spawn) it is counted once from the whole list.
local function memory_size(list_key, size_key, prefix)
  local f = redis.call('HMGET', size_key, prefix .. 'chars', prefix .. 'last_user')
  if f[1] and f[2] then return {chars = tonumber(f[1]), last_user = tonumber(f[2])} end
  local size = {chars = 0, last_user = -1}
  for i, raw in ipairs(redis.call('LRANGE', list_key, 0, -1)) do
    size.chars = size.chars + text_chars(raw)
    if is_user_message(raw) then size.last_user = i - 1 end
  end
  return size
end

-- Where to cut the memory so that at most `max_messages` and `max_chars` remain: before the
-- first user message that gets it there, so whole exchanges go and no assistant tool call is
-- separated from its results. The newest exchange is never cut, even when it alone is over a
-- cap (a bound to approach, not a cut mid-step). Reads only what it drops, and the message it
-- cuts before. Returns the index to keep from (0: nothing goes) and the characters dropped.
local function memory_cut(list_key, size, max_messages, max_chars)
  local length = redis.call('LLEN', list_key)
  if size.last_user <= 0 or (length <= max_messages and size.chars <= max_chars) then
    return 0, 0
  end
  local dropped_chars = 0
  local first = 0
  while true do
    local batch = redis.call('LRANGE', list_key, first,
      math.min(first + MEMORY_SCAN_BATCH - 1, size.last_user))
    for j, raw in ipairs(batch) do
      local i = first + j - 1
      if i == size.last_user or (i > 0 and is_user_message(raw)
          and length - i <= max_messages and size.chars - dropped_chars <= max_chars) then
        return i, dropped_chars
      end
      dropped_chars = dropped_chars + text_chars(raw)
    end
    first = first + #batch
  end
end

-- Append ARGV[first_arg..] to a memory list, then drop its oldest whole exchanges past
-- `max_messages` messages or `max_chars` characters; returns how many messages were dropped.
-- The size record's `seq` counts the messages ever appended since the memory began (a memory
-- older than the count starts it at its length), so a turn's first message keeps its number
-- while the caps drop older ones (shared/teams/transcripts.py).
local function remember(list_key, size_key, prefix, first_arg, max_messages, max_chars)
  local size = memory_size(list_key, size_key, prefix)
  local length = redis.call('LLEN', list_key)
  if not redis.call('HGET', size_key, prefix .. 'seq') then
    redis.call('HSET', size_key, prefix .. 'seq', length)
  end
  redis.call('HINCRBY', size_key, prefix .. 'seq', #ARGV - first_arg + 1)
  for i = first_arg, #ARGV do
    redis.call('RPUSH', list_key, ARGV[i])
    size.chars = size.chars + text_chars(ARGV[i])
    if is_user_message(ARGV[i]) then size.last_user = length + i - first_arg end
  end
  local cut, dropped_chars = memory_cut(list_key, size, max_messages, max_chars)
  if cut > 0 then
    redis.call('LTRIM', list_key, cut, -1)
    size.chars = size.chars - dropped_chars
    size.last_user = size.last_user - cut
  end
  redis.call('HSET', size_key, prefix .. 'chars', size.chars, prefix .. 'last_user',
    size.last_user)
  return cut
end

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
  if not current[2] then return MISSING end
  if current[1] ~= token or token == '0' then
    redis.call('HINCRBY', task_key, 'stale_writes', 1)
    return STALE
  end
  if current[2] ~= 'in_progress' then return CONFLICT end
  return APPLIED
end

-- After a run ended its keys expire (shared/runs/retention.py); a set a late write recreates (a release
-- after the end) must expire with the task it belongs to, not live forever.
local function inherit_ttl(key, task_key)
  local ttl = redis.call('PTTL', task_key)
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
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

local function block(task_key, ready_key, counts_key, events_key, detail, error_text, now)
  local tid = redis.call('HGET', task_key, 'task_id')
  redis.call('ZREM', ready_key, tid)
  leave_lane(task_key, tid)
  set_status(task_key, counts_key, 'blocked')
  redis.call('HSET', task_key, 'phase', 'blocked', 'detail', detail, 'error', error_text,
    'percent', 100, 'end_ms', now, 'updated_ms', now)
  if events_key then task_event(events_key, task_key, 'blocked', 0) end
end

-- Block every pending/ready task among KEYS[first..last] (a dependents closure).
local function block_dependents(first, last, ready_key, counts_key, events_key, now)
  for i = first, last do
    local status = redis.call('HGET', KEYS[i], 'status')
    if status == 'pending' or status == 'ready' then
      block(KEYS[i], ready_key, counts_key, events_key, 'Blocked: dependency failed.',
        'dependency failed', now)
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

-- Append a message to the run's bus (the fields shared/bus.py reads) and index it in the inboxes
-- KEYS[inbox_first..inbox_last]; returns the message id. created_at is Redis's clock (now_ms), so
-- it agrees with the stream order whatever the publishers' clocks say. publish.lua uses it, and so do complete
-- and fail, which announce task.result / task.error in the same step as the state change.
-- `extra` (optional) is a flat list of more fields, e.g. {'request_id', id, 'approve', '1'} on
-- the teammates' protocol messages.
local function publish_message(bus_key, seq_key, inbox_first, inbox_last,
                               from, to, mtype, task_id, content, created_at, extra)
  local fields = {'from', from, 'to', to, 'type', mtype, 'task_id', task_id,
    'content', content, 'created_at', created_at}
  for _, value in ipairs(extra or {}) do fields[#fields + 1] = value end
  local id = redis.call('XADD', bus_key, '*', unpack(fields))
  local seq = redis.call('INCR', seq_key)
  for i = inbox_first, inbox_last do
    redis.call('XADD', KEYS[i], id, 'seq', seq)
  end
  -- After the run ended its keys expire (shared/runs/retention.py); keys a late message creates must
  -- not outlive the bus.
  local ttl = redis.call('PTTL', bus_key)
  if ttl > 0 then
    redis.call('PEXPIRE', seq_key, ttl)
    for i = inbox_first, inbox_last do
      redis.call('PEXPIRE', KEYS[i], ttl)
    end
  end
  return id
end

-- --- Team tasks (shared/teams/tasks.py) ---------------------------------------------------------
-- A team's task hashes are the board's, plus role (''), reminded ('1' once the holder was
-- reminded) and released_from (the teammate a reminder release took it from); member_id is the
-- assignee, task the subject, context the description.

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
  requeue(task_key, ready_key, running_key, counts_key, nil, reason, now)
  redis.call('HSET', task_key, 'reminded', '0')
  task_event(events_key, task_key, 'released', 0)
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

-- A teammate's lifecycle change on its team's events stream, beside the task events: people and
-- the lead wait on it (XREAD BLOCK) instead of polling the mate hashes. Fields: mate, status,
-- detail (why: spawned, woken, a task id, the idle reason, ...).
local function mate_event(events_key, name, status, detail)
  redis.call('XADD', events_key, 'MAXLEN', '~', 10000, '*',
    'mate', name, 'status', status, 'detail', detail or '')
end

-- A protocol request's change on its team's events stream. Fields: request, status, detail
-- (the kind and the teammate).
local function request_event(events_key, request_id, status, detail)
  redis.call('XADD', events_key, 'MAXLEN', '~', 10000, '*',
    'request', request_id, 'status', status, 'detail', detail or '')
end

-- What a teammate is told when a task is claimed for it (a task.assigned message).
local function team_task_text(task_key)
  local f = redis.call('HMGET', task_key, 'task_id', 'task', 'context')
  local text = 'You now hold ' .. f[1] .. ' from the team task board: ' .. f[2]
  if f[3] and f[3] ~= '' then text = text .. '\n' .. f[3] end
  return text .. '\nDo it, then call complete_task(task_id="' .. f[1] .. '", result=...) with '
    .. 'what you produced.'
end

-- --- Bounded releases (team tasks and a planned run's team_release_task) -----------------------
-- A task hash counts its releases (`releases`) and keeps the last RELEASE_HISTORY releasers
-- (`released_by`, csv, oldest first), so a task nobody finishes cannot pass between members for
-- ever: past its bound it fails with that history as its error.
local RELEASE_HISTORY = 10

-- Note a release of the task by `name`. Returns whether the task is past `bound` (its releases
-- already reached it; '' or nil = unbounded): then the caller fails it instead of releasing it
-- (`releases` counts the releases actually made; the history names the last holder too).
local function note_release(task_key, name, bound)
  local names = {}
  for item in string.gmatch(redis.call('HGET', task_key, 'released_by') or '', '[^,]+') do
    names[#names + 1] = item
  end
  names[#names + 1] = name
  while #names > RELEASE_HISTORY do table.remove(names, 1) end
  redis.call('HSET', task_key, 'released_by', table.concat(names, ','))
  local limit = tonumber(bound or '')
  local made = tonumber(redis.call('HGET', task_key, 'releases') or '0') or 0
  if limit and made >= limit then return true end
  redis.call('HSET', task_key, 'releases', made + 1)
  return false
end

-- The error of a task failed past its release bound: how often and by whom it was given up.
local function releases_error(task_key, setting)
  local f = redis.call('HMGET', task_key, 'releases', 'released_by')
  return 'released ' .. (f[1] or '0') .. ' times (' .. setting .. '), given up in turn by '
    .. (string.gsub(f[2] or '', ',', ', '))
end

-- Fail a held task (no release): its claim ends (token revoked), it leaves the running set and
-- the ready zset, `error` and `detail` say why. The caller blocks or names its dependents.
local function fail_held(task_key, ready_key, running_key, counts_key, events_key, error_text,
                         now)
  local tid = redis.call('HGET', task_key, 'task_id')
  set_status(task_key, counts_key, 'failed')
  redis.call('SREM', running_key, tid)
  redis.call('ZREM', ready_key, tid)
  leave_lane(task_key, tid)
  redis.call('HSET', task_key, 'token', 0, 'phase', 'failed', 'detail', error_text,
    'error', error_text, 'percent', 100, 'end_ms', now, 'updated_ms', now,
    'last_heartbeat_ms', now, 'requeue_reason', '', 'reminded', '0')
  task_event(events_key, task_key, 'failed', 0)
end

-- --- Stream ids (lead_inbox_fold.lua, team_bus_compact.lua, team_peek.lua) ----------------------
-- Stream ids ('<ms>-<seq>') compare by their two numbers, not as strings ('10-0' > '9-0').

local function stream_id_after(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  a_ms, b_ms = tonumber(a_ms), tonumber(b_ms)
  return a_ms > b_ms or (a_ms == b_ms and tonumber(a_seq) > tonumber(b_seq))
end

-- The later of two stream ids.
local function stream_id_max(a, b)
  if stream_id_after(a, b) then return a end
  return b
end

-- A stream entry's flat field list ({k1, v1, k2, v2, ...}) as a table.
local function entry_fields(flat)
  local fields = {}
  for i = 1, #flat, 2 do fields[flat[i]] = flat[i + 1] end
  return fields
end
