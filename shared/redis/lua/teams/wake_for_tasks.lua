-- wake_for_tasks: hand ready tasks to idle teammates, pair by pair as the caller proposed them
-- (shared/teams/tasks.py reads the heads of the ready lanes idle teammates draw from and matches
-- them, each task in number order to the fitting teammate idle longest). Each pair is checked
-- again here: the teammate still idle, not waiting for its plan's approval, not given a task by
-- an earlier pair; the task still ready and fitting it (team_task_fits). A pair that passes gets
-- the claim, a task.assigned message and the flip to working, in one step; the caller enqueues
-- the turn. A pair that fails is skipped (something changed since the read: the caller reads
-- again); a proposed task no longer ready leaves its lane, which it should have left already.
-- KEYS[1] ready zset, KEYS[2] running set, KEYS[3] counts hash, KEYS[4] token counter,
-- KEYS[5] events stream, KEYS[6] bus stream, KEYS[7] bus sequence counter,
-- KEYS[8..] triples: a mate hash, its inbox, the task hash proposed for it.
-- ARGV[1..] the teammates' names, in the order of the triples.
-- Returns {skipped, teammate, task id, ...}: how many pairs failed their check, then each claim
-- made.
-- uses: core, tasks, team, events, messages
-- access: write
-- KEYS: ready_key, running_key, counts_key, tokens_key, events_key, bus_key, bus_seq_key,
--   triple_keys...
-- ARGV: names...
local ready_key, running_key, counts_key, tokens_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local events_key, bus_key, bus_seq_key = KEYS[5], KEYS[6], KEYS[7]
local triple_keys_from = 8  -- KEYS[triple_keys_from..]
local names_from = 1  -- ARGV[names_from..]
local now = now_ms()
local woken, out, skipped = {}, {0}, 0
for i = names_from, #ARGV do
  local name = ARGV[i]
  local mate_key, inbox, task_key = KEYS[5 + 3 * i], 6 + 3 * i, KEYS[7 + 3 * i]
  local f = redis.call('HMGET', mate_key, 'status', 'role')
  local t = redis.call('HMGET', task_key, 'status', 'task_id')
  if t[1] and t[1] ~= 'ready' then leave_lane(task_key, t[2]) end
  if not woken[name] and f[1] == 'idle' and not plan_gated(mate_key)
      and team_task_fits(task_key, name, f[2], true) then
    local tid = team_claim(task_key, ready_key, running_key, counts_key, tokens_key, events_key,
      name, now)
    redis.call('HSET', mate_key, 'status', 'working', 'idle_reason', '', 'attempts', 0,
      'last_seen_ms', now)
    mate_event(events_key, name, 'working', tid)
    publish_message(bus_key, bus_seq_key, {KEYS[inbox]}, 'system', name, 'task.assigned', tid,
      team_task_text(task_key), now)
    woken[name] = true
    out[#out + 1] = name
    out[#out + 1] = tid
  else
    skipped = skipped + 1
  end
end
out[1] = skipped
return out
