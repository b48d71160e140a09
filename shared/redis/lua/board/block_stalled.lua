-- block_stalled: block every pending or ready task, with a reason (max rounds, cycle, cancel).
-- In-progress and terminal tasks are left alone, as in AI4J.
-- KEYS[1] ready zset, KEYS[2] counts hash, KEYS[3] events stream, KEYS[4] unanswered zset,
-- KEYS[5..] every task hash.
-- ARGV[1] reason. Returns the number of tasks blocked.
-- uses: core, tasks
-- access: write
-- KEYS: ready_key, counts_key, events_key, unanswered_key, task_keys...
-- ARGV: reason
local ready_key, counts_key, events_key, unanswered_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local task_keys_from = 5  -- KEYS[task_keys_from..]
local reason = ARGV[1]
local now = now_ms()
local n = 0
for i = task_keys_from, #KEYS do
  local status = redis.call('HGET', KEYS[i], 'status')
  if status == 'pending' or status == 'ready' then
    block(KEYS[i], ready_key, counts_key, unanswered_key, events_key, reason, reason, now)
    n = n + 1
  end
end
return n
