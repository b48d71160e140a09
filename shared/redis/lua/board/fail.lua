-- fail: mark a task failed and block everything that depends on it, transitively.
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream, KEYS[7] bus stream, KEYS[8] bus sequence,
-- KEYS[9..] the task's dependents closure.
-- ARGV[1] token ('' = the coordinator fails a task nobody holds: it must be pending or ready),
-- ARGV[2] error, ARGV[3] duration ms,
-- ARGV[4] detail (the output or error shortened in Python: Lua would cut UTF-8 bytes),
-- ARGV[5] who announces the task.error message to lead ('' = no message), ARGV[6] its content.
-- Returns 1 applied, -1 stale token (counted in stale_writes, nothing else changes),
-- -2 conflict (already ended, or a tokenless fail of a claimed task), 0 no such task.
-- uses: core, tasks, messages
-- access: write
-- KEYS: task_key, ready_key, running_key, counts_key, heartbeat_key, events_key, bus_key,
--   bus_seq_key, closure_keys...
-- ARGV: token, error_text, duration_ms, detail, announcer, announcement
local verdict
if ARGV[1] == '' then
  local status = redis.call('HGET', KEYS[1], 'status')
  if not status then verdict = MISSING
  elseif status == 'pending' or status == 'ready' then verdict = APPLIED
  else verdict = CONFLICT end
else
  verdict = check_token(KEYS[1], ARGV[1])
end
if verdict ~= APPLIED then return verdict end
local now = now_ms()
local tid = redis.call('HGET', KEYS[1], 'task_id')
set_status(KEYS[1], KEYS[4], 'failed')
local detail = ARGV[4]
redis.call('HSET', KEYS[1], 'phase', 'failed', 'detail', detail, 'percent', 100,
  'error', ARGV[2], 'duration_ms', ARGV[3], 'end_ms', now, 'last_heartbeat_ms', now,
  'updated_ms', now)
redis.call('ZREM', KEYS[2], tid)
redis.call('SREM', KEYS[3], tid)
redis.call('DEL', KEYS[5])
block_dependents(9, #KEYS, KEYS[2], KEYS[4], KEYS[6], now)
if ARGV[5] ~= '' then
  publish_message(KEYS[7], KEYS[8], 1, 0, ARGV[5], 'lead', 'task.error', tid, ARGV[6], now)
end
task_event(KEYS[6], KEYS[1], 'failed', ARGV[1])
return APPLIED
