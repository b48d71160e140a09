-- block_stalled: block every pending or ready task given, with a reason (max rounds, cycle,
-- cancel). In-progress and terminal tasks are left alone, as in AI4J.
-- KEYS[1] ready zset, KEYS[2] counts hash, KEYS[3] events stream, KEYS[4..] candidate task hashes.
-- ARGV[1] reason. Returns the number of tasks blocked.
local now = now_ms()
local n = 0
for i = 4, #KEYS do
  local status = redis.call('HGET', KEYS[i], 'status')
  if status == 'pending' or status == 'ready' then
    local tid = redis.call('HGET', KEYS[i], 'task_id')
    redis.call('ZREM', KEYS[1], tid)
    set_status(KEYS[i], KEYS[2], 'blocked')
    redis.call('HSET', KEYS[i], 'phase', 'blocked', 'detail', ARGV[1], 'error', ARGV[1],
      'percent', 100, 'end_ms', now, 'updated_ms', now)
    event(KEYS[3], tid, 'blocked', 0)
    n = n + 1
  end
end
return n
