-- snapshot: every task hash at one instant, so a reader never sees half a transition.
-- KEYS[1..] the task hashes in plan order.
-- Returns one flat HGETALL reply per task (empty for a task that does not exist).
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGETALL', KEYS[i]) end
return out
