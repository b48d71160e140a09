-- complete: record a task's output, if the caller still holds the claim; wake its dependents.
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream, KEYS[7] bus stream, KEYS[8] bus sequence,
-- KEYS[9..] the task's direct dependents.
-- ARGV[1] token, ARGV[2] output, ARGV[3] duration ms,
-- ARGV[4] detail (the output or error shortened in Python: Lua would cut UTF-8 bytes),
-- ARGV[5] who announces the task.result message to lead ('' = no message), ARGV[6] its content.
-- Returns 1 applied, -1 stale token (counted in stale_writes, nothing else changes),
-- -2 the claim already ended, 0 no such task.
-- uses: core, tasks, messages
-- access: write
-- KEYS: task_key, ready_key, running_key, counts_key, heartbeat_key, events_key, bus_key,
--   bus_seq_key, dependent_keys...
-- ARGV: token, output, duration_ms, detail, announcer, announcement
local verdict = check_token(KEYS[1], ARGV[1])
if verdict ~= APPLIED then return verdict end
local now = now_ms()
local tid = redis.call('HGET', KEYS[1], 'task_id')
set_status(KEYS[1], KEYS[4], 'completed')
local detail = ARGV[4]
redis.call('HSET', KEYS[1], 'phase', 'completed', 'detail', detail, 'percent', 100,
  'output', ARGV[2], 'error', '', 'duration_ms', ARGV[3], 'end_ms', now,
  'last_heartbeat_ms', now, 'updated_ms', now)
redis.call('SREM', KEYS[3], tid)
redis.call('DEL', KEYS[5])
for i = 9, #KEYS do
  local left = redis.call('HINCRBY', KEYS[i], 'deps_left', -1)
  if left <= 0 and redis.call('HGET', KEYS[i], 'status') == 'pending' then
    make_ready(KEYS[i], KEYS[2], KEYS[4])
  end
end
if ARGV[5] ~= '' then
  publish_message(KEYS[7], KEYS[8], 1, 0, ARGV[5], 'lead', 'task.result', tid, ARGV[6], now)
end
task_event(KEYS[6], KEYS[1], 'completed', ARGV[1])
return APPLIED
