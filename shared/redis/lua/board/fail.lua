-- fail: mark a task failed and block everything that depends on it, transitively.
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream, KEYS[7] bus stream, KEYS[8] bus sequence,
-- KEYS[9] unanswered zset, KEYS[10..] the task's dependents closure.
-- ARGV[1] token ('' = the coordinator fails a task nobody holds: it must be pending or ready),
-- ARGV[2] error, ARGV[3] duration ms,
-- ARGV[4] detail (the output or error shortened in Python: Lua would cut UTF-8 bytes),
-- ARGV[5] who announces the task.error message to lead ('' = no message), ARGV[6] its content.
-- Returns 'ok' (applied), 'stale' (a stale token, counted in stale_writes, nothing else
-- changes), 'conflict' (already ended, or a tokenless fail of a claimed task) or 'unknown' (no
-- such task).
-- uses: core, tasks, messages
-- access: write
-- KEYS: task_key, ready_key, running_key, counts_key, heartbeat_key, events_key, bus_key,
--   bus_seq_key, unanswered_key, closure_keys...
-- ARGV: token, error_text, duration_ms, detail, announcer, announcement
local task_key, ready_key, running_key, counts_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local heartbeat_key, events_key, bus_key, bus_seq_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local unanswered_key = KEYS[9]
local closure_keys_from = 10  -- KEYS[closure_keys_from..]
local token, error_text, duration_ms, detail = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local announcer, announcement = ARGV[5], ARGV[6]
local verdict
if token == '' then
  local status = redis.call('HGET', task_key, 'status')
  if not status then verdict = UNKNOWN
  elseif status == 'pending' or status == 'ready' then verdict = OK
  else verdict = CONFLICT end
else
  verdict = check_token(task_key, token)
end
if verdict ~= OK then return verdict end
local now = now_ms()
local tid = redis.call('HGET', task_key, 'task_id')
set_status(task_key, counts_key, 'failed')
mark_unanswered(unanswered_key, task_key)
redis.call('HSET', task_key, 'phase', 'failed', 'detail', detail, 'percent', 100,
  'error', error_text, 'duration_ms', duration_ms, 'end_ms', now, 'last_heartbeat_ms', now,
  'updated_ms', now)
redis.call('ZREM', ready_key, tid)
redis.call('SREM', running_key, tid)
redis.call('DEL', heartbeat_key)
block_dependents(closure_keys_from, #KEYS, ready_key, counts_key, unanswered_key, events_key,
  now)
if announcer ~= '' then
  publish_message(bus_key, bus_seq_key, {}, announcer, 'lead', 'task.error', tid, announcement, now)
end
task_event(events_key, task_key, 'failed', token)
return OK
