-- turn_end: end a turn, or tell it to go on: mail arrived during it; it still holds a team task
-- it was not yet reminded of (one task.reminder, then the next end releases the task, or fails
-- it once it was released its `max_releases` times: one task.failed notice to the lead); or an
-- eligible ready task (the lowest number first, from the heads of the ready lanes it draws from)
-- is claimed for it with a task.assigned message.
-- A teammate that approved its shutdown (request_resolve.lua marked `shutdown_request`) ends
-- shut down instead, its tasks back on the board.
-- KEYS[1] the turn key, KEYS[2] the mate hash, KEYS[3] its inbox, KEYS[4] read offsets hash,
-- KEYS[5] bus stream, KEYS[6] bus sequence counter, KEYS[7] the lead's inbox, KEYS[8] ready
-- zset, KEYS[9] running set, KEYS[10] counts hash, KEYS[11] token counter, KEYS[12] events
-- stream, KEYS[13..] the in-progress task hashes (ARGV[7] of them), then the teammate's ready
-- lanes (ARGV[8] of them: its own, its role's, the open one), then the candidates: the first
-- tasks of each lane as the caller read them (ARGV[9..] says how many it read of each), merged
-- in number order.
-- ARGV[1] token, ARGV[2] teammate name, ARGV[3] idle reason ('done', 'step_limit',
-- 'error: ...'), ARGV[4] notice content, ARGV[5] '0' (a turn that may go on), '1' to end even
-- with unread mail (a failed turn: the mail waits for the next wake; its tasks go back to the
-- board, not to it, counted against their releases) or 'budget' (the team's budget is spent:
-- ended as a failed turn is, but its tasks go back uncounted, as nobody failed them),
-- ARGV[6] last error ('' = none), ARGV[7] how many in-progress task hashes KEYS holds,
-- ARGV[8] how many lanes, ARGV[9..] how many of each lane's first tasks the caller read.
-- Returns {verdict, released}: verdict 'continue' (run another turn in the same job), 'idle'
-- (ended; one teammate.idle notice to lead), 'shutdown' (ended shut down; one teammate.shutdown
-- notice; its unread mail waits) or 'stale' (the token no longer holds the turn: nothing
-- changes) or 'retry' (the running tasks or the lanes' first tasks changed since the caller
-- read them: read again; nothing changed) or 'more' (no candidate fits it and a lane holds
-- more than the caller read: read deeper; nothing changed); released: how many tasks went
-- back to the board (the caller wakes teammates).
-- uses: core, releases, team, events, messages
-- access: write
-- KEYS: turn_key, mate_key, inbox_key, offsets_key, bus_key, bus_seq_key, lead_inbox_key,
--   ready_key, running_key, counts_key, tokens_key, events_key, task_keys...
-- ARGV: token, name, idle_reason, notice, ending, last_error, held_count, lane_count,
--   lane_depths...
-- Every key comes in KEYS, though all share the team's hash tag: built from one prefix here,
-- key names would be spelled in Lua as well as in shared/keys.py, and a cluster client routes a
-- script by the keys it declares.
local turn_key, mate_key, inbox_key, offsets_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local bus_key, bus_seq_key, lead_inbox_key, ready_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local running_key, counts_key, tokens_key, events_key = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local task_keys_from = 13  -- KEYS[task_keys_from..]
local token, name, idle_reason, notice, ending = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local last_error, held_count, lane_count = ARGV[6], ARGV[7], ARGV[8]
local lane_depths_from = 9  -- ARGV[lane_depths_from..]
if redis.call('GET', turn_key) ~= token then return {'stale', 0} end
local last_held = task_keys_from - 1 + tonumber(held_count)
local last_lane = last_held + tonumber(lane_count)
if not snapshot_current(running_key, task_keys_from, last_held) then return {'retry', 0} end
local deeper = lane_heads_current(last_held + 1, last_lane, lane_depths_from, last_lane + 1)
if deeper == nil then return {'retry', 0} end
local held = team_held(task_keys_from, last_held, name)
local approved = redis.call('HGET', mate_key, 'shutdown_request') or ''
local now = now_ms()
local released = 0

-- The first candidate it may take (reads only: releases below touch only its held tasks, which
-- are no candidates). None, with a lane longer than what was read: the caller reads deeper.
local pick = nil
if approved == '' and ending == '0' and not plan_gated(mate_key) then
  local role = redis.call('HGET', mate_key, 'role')
  for i = last_lane + 1, #KEYS do
    if team_task_fits(KEYS[i], name, role, true) then pick = KEYS[i] break end
  end
  if pick == nil and deeper then return {'more', 0} end
end

-- Give the held tasks back (`mark`: not to this teammate automatically, and counted against
-- the task's max_releases: one past it fails instead, the lead told once by a task.failed).
-- Returns the tasks that went back (each failed one is told to the lead here).
local function release_all(reason, mark)
  local back, failed = {}, {}
  for _, task_key in ipairs(held) do
    if mark and note_release(task_key, name, redis.call('HGET', task_key, 'max_releases')) then
      fail_held(task_key, ready_key, running_key, counts_key, events_key,
        releases_error(task_key, 'max_task_releases'), now)
      failed[#failed + 1] = task_key
    else
      team_release(task_key, ready_key, running_key, counts_key, events_key, reason, now)
      if mark then redis.call('HSET', task_key, 'released_from', name) end
      back[#back + 1] = task_key
    end
  end
  for _, task_key in ipairs(failed) do
    local f = redis.call('HMGET', task_key, 'task_id', 'error', 'dependents')
    local note = f[1] .. ' failed: ' .. f[2]
    local after = {}
    for tid in string.gmatch(f[3] or '', '[^,]+') do after[#after + 1] = tid end
    if #after > 0 then
      -- A notice names a few: a task may have thousands of dependents.
      local named = table.concat(after, ', ', 1, math.min(#after, 10))
      if #after > 10 then named = named .. ' and ' .. (#after - 10) .. ' more' end
      note = note .. '; the tasks after it (' .. named .. ') stay pending'
    end
    publish_message(bus_key, bus_seq_key, {lead_inbox_key}, 'system', 'lead', 'task.failed', f[1],
      note, now)
  end
  return back
end

if approved ~= '' then
  released = #release_all(name .. ' shut down', false)
  redis.call('DEL', turn_key)
  redis.call('HSET', mate_key, 'status', 'shutdown', 'idle_reason', '', 'turn_token', '',
    'attempts', 0, 'last_seen_ms', now, 'last_error', last_error)
  publish_message(bus_key, bus_seq_key, {lead_inbox_key}, 'system', 'lead', 'teammate.shutdown', '',
    name .. ' shut down (request ' .. approved .. ' approved)', now)
  mate_event(events_key, name, 'shutdown', approved)
  return {'shutdown', released}
end
if ending == '0' then
  local offset = redis.call('HGET', offsets_key, name) or '0-0'
  if #redis.call('XRANGE', inbox_key, '(' .. offset, '+', 'COUNT', 1) > 0 then
    return {'continue', 0}
  end
  local unreminded = {}
  for _, task_key in ipairs(held) do
    if redis.call('HGET', task_key, 'reminded') ~= '1' then
      unreminded[#unreminded + 1] = redis.call('HGET', task_key, 'task_id')
    end
  end
  if #unreminded > 0 then
    for _, task_key in ipairs(held) do redis.call('HSET', task_key, 'reminded', '1') end
    publish_message(bus_key, bus_seq_key, {inbox_key}, 'system', name, 'task.reminder',
      unreminded[1],
      'You still hold ' .. table.concat(unreminded, ', ') .. '. Finish it and call '
      .. 'complete_task(task_id, result), or say why you cannot: if your turn ends again '
      .. 'without that, it goes back to the team task board.', now)
    return {'continue', 0}
  end
  local back = release_all(name .. ' ended two turns without completing it', true)
  released = #back
  for _, task_key in ipairs(back) do
    local f = redis.call('HMGET', task_key, 'task_id', 'member_id')
    local note = f[1] .. ' is back on the board: ' .. name .. ' ended two turns without '
      .. 'completing it'
    if f[2] == name then
      note = note .. '; it is reserved for ' .. name .. ', so only ' .. name .. ' or a new '
        .. 'assignee takes it'
    end
    publish_message(bus_key, bus_seq_key, {lead_inbox_key}, 'system', 'lead', 'task.released',
      f[1], note, now)
  end
  if pick then
    local tid = team_claim(pick, ready_key, running_key, counts_key, tokens_key, events_key, name,
      now)
    publish_message(bus_key, bus_seq_key, {inbox_key}, 'system', name, 'task.assigned', tid,
      team_task_text(pick), now)
    return {'continue', released}
  end
elseif ending == 'budget' then
  released = #release_all(name .. ' stopped: ' .. last_error, false)
else
  released = #release_all(name .. "'s turn failed: " .. last_error, true)
end
redis.call('DEL', turn_key)
redis.call('HSET', mate_key, 'status', 'idle', 'idle_reason', idle_reason, 'turn_token', '',
  'attempts', 0, 'last_seen_ms', now, 'last_error', last_error)
publish_message(bus_key, bus_seq_key, {lead_inbox_key}, 'system', 'lead', 'teammate.idle', '',
  notice, now)
mate_event(events_key, name, 'idle', idle_reason)
return {'idle', released}
