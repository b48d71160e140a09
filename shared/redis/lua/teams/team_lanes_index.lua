-- team_lanes_index: put tasks of a team written before ready lanes existed in their lanes: each
-- task hash without a `lane` gets the one the caller computed from its role and assignee (both
-- fixed when it was added), and a ready one joins it, in one step per chunk, so a task made
-- ready meanwhile is never left out of its lane.
-- KEYS[1..n] task hashes, KEYS[n+1..2n] their lanes, in the same order.
-- Returns how many tasks got a lane.
-- access: write
-- KEYS: task_and_lane_keys...
-- ARGV: none
local task_and_lane_keys_from = 1  -- KEYS[task_and_lane_keys_from..]
local n = #KEYS / 2
local laned = 0
for i = 1, n do
  local f = redis.call('HMGET', KEYS[i], 'task_id', 'lane', 'status', 'pos')
  if f[1] and (not f[2] or f[2] == '') then
    redis.call('HSET', KEYS[i], 'lane', KEYS[n + i])
    if f[3] == 'ready' then redis.call('ZADD', KEYS[n + i], tonumber(f[4] or '0'), f[1]) end
    laned = laned + 1
  end
end
return laned
