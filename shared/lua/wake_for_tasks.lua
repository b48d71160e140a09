-- wake_for_tasks: hand ready tasks to idle teammates: for each task, in number order, ONE idle
-- teammate that may take it (an assignee reserves it, otherwise the role matches or the task has
-- none; not one still waiting for its plan's approval), the one idle longest, gets the claim, a
-- task.assigned message and the flip to working, in one step; the caller enqueues its turn.
-- Tasks no idle teammate fits wait for the next turn end (turn_end.lua claims them).
-- KEYS[1] ready zset, KEYS[2] running set, KEYS[3] counts hash, KEYS[4] token counter,
-- KEYS[5] events stream, KEYS[6] bus stream, KEYS[7] bus sequence counter,
-- KEYS[8..] pairs: a mate hash, its inbox (ARGV[1] pairs), then the candidate task hashes.
-- ARGV[1] number of teammates, ARGV[2..] their names, in the order of the pairs.
-- Returns a flat list: teammate, task id, ... for every claim made.
local mates = tonumber(ARGV[1])
local now = now_ms()
local woken, out = {}, {}
for t = 8 + 2 * mates, #KEYS do
  local task_key = KEYS[t]
  local best, best_seen = nil, nil
  for i = 1, mates do
    local mate_key, name = KEYS[6 + 2 * i], ARGV[1 + i]
    if not woken[name] then
      local f = redis.call('HMGET', mate_key, 'status', 'role', 'last_seen_ms')
      if f[1] == 'idle' and not plan_gated(mate_key)
          and team_task_fits(task_key, name, f[2], true) then
        local seen = tonumber(f[3] or '0') or 0
        if best == nil or seen < best_seen then best, best_seen = i, seen end
      end
    end
  end
  if best then
    local name, mate_key, inbox = ARGV[1 + best], 6 + 2 * best, 7 + 2 * best
    local tid = team_claim(task_key, KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], name, now)
    redis.call('HSET', KEYS[mate_key], 'status', 'working', 'idle_reason', '', 'attempts', 0,
      'last_seen_ms', now)
    mate_event(KEYS[5], name, 'working', tid)
    publish_message(KEYS[6], KEYS[7], inbox, inbox, 'system', name, 'task.assigned', tid,
      team_task_text(task_key), now)
    woken[name] = true
    out[#out + 1] = name
    out[#out + 1] = tid
  end
end
return out
