-- reclaim: take back every given claim whose heartbeat key is gone: ready again (`reclaimed`
-- set: the attempt died, so the next one replays the task's journal; only release_budget.lua
-- sets it too),
-- or failed "claim expired after N attempts" once N reaches max attempts (its dependents are
-- blocked).
-- With a forced reason, fail every given in-progress claim, alive or not, with that reason: a
-- stopped run gives up on members that outlasted its grace period (their tokens die with it).
-- KEYS[1] ready zset, KEYS[2] running set, KEYS[3] counts hash, KEYS[4] events stream,
-- KEYS[5] bus stream, KEYS[6] bus sequence, KEYS[7] unanswered zset, then one group per
-- candidate: task hash, heartbeat key, the task's dependents closure.
-- ARGV[1] max attempts, ARGV[2] '1' to announce a failure as task.error to lead ('' = silent),
-- ARGV[3] forced failure reason ('' = reclaim expired claims only),
-- ARGV[4..] the closure size of each group, in order.
-- Returns the ids reclaimed. Candidates whose claim is alive (or already ended) are skipped.
-- uses: core, tasks, messages
-- access: write
-- KEYS: ready_key, running_key, counts_key, events_key, bus_key, bus_seq_key, unanswered_key,
--   groups...
-- ARGV: max_attempts, announce, forced_reason, closure_sizes...
local ready_key, running_key, counts_key, events_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local bus_key, bus_seq_key, unanswered_key = KEYS[5], KEYS[6], KEYS[7]
local groups_from = 8  -- KEYS[groups_from..]
local max_attempts, announce, forced_reason = ARGV[1], ARGV[2], ARGV[3]
local closure_sizes_from = 4  -- ARGV[closure_sizes_from..]
local now = now_ms()
local reclaimed = {}
local at = groups_from
for g = closure_sizes_from, #ARGV do
  local task_key, hb_key = KEYS[at], KEYS[at + 1]
  local closure_first, closure_last = at + 2, at + 1 + tonumber(ARGV[g])
  at = closure_last + 1
  if redis.call('HGET', task_key, 'status') == 'in_progress'
     and (forced_reason ~= '' or redis.call('EXISTS', hb_key) == 0) then
    local tid = redis.call('HGET', task_key, 'task_id')
    local attempts = tonumber(redis.call('HGET', task_key, 'attempts'))
    if forced_reason ~= '' or attempts >= tonumber(max_attempts) then
      local reason, why = forced_reason, forced_reason
      if reason == '' then
        reason, why = 'claim expired after ' .. attempts .. ' attempts', 'claim expired'
      end
      set_status(task_key, counts_key, 'failed')
      mark_unanswered(unanswered_key, task_key)
      redis.call('SREM', running_key, tid)
      redis.call('DEL', hb_key)
      redis.call('HSET', task_key, 'token', 0, 'phase', 'failed', 'detail', reason,
        'error', reason, 'percent', 100, 'end_ms', now, 'updated_ms', now,
        'requeue_reason', why)
      block_dependents(closure_first, closure_last, ready_key, counts_key, unanswered_key,
        events_key, now)
      if announce == '1' then
        local holder = redis.call('HGET', task_key, 'claimed_by')
        if not holder or holder == '' then holder = 'system' end
        publish_message(bus_key, bus_seq_key, {}, holder, 'lead', 'task.error', tid, reason, now)
      end
      task_event(events_key, task_key, 'failed', 0)
    else
      requeue(task_key, ready_key, running_key, counts_key, hb_key, 'claim expired', now)
      redis.call('HSET', task_key, 'reclaimed', 1)
      task_event(events_key, task_key, 'reclaimed', 0)
    end
    table.insert(reclaimed, tid)
  end
end
return reclaimed
