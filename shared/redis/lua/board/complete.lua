-- complete: record a task's output, if the caller still holds the claim; wake its dependents.
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream, KEYS[7] bus stream, KEYS[8] bus sequence,
-- KEYS[9..] the task's direct dependents.
-- ARGV[1] token, ARGV[2] output, ARGV[3] duration ms,
-- ARGV[4] detail (the output or error shortened in Python: Lua would cut UTF-8 bytes),
-- ARGV[5] who announces the task.result message to lead ('' = no message), ARGV[6] its content.
-- Returns 'ok' (applied), 'stale' (a stale token, counted in stale_writes, nothing else
-- changes), 'conflict' (the claim already ended) or 'unknown' (no such task).
-- uses: core, tasks, messages
-- access: write
-- KEYS: task_key, ready_key, running_key, counts_key, heartbeat_key, events_key, bus_key,
--   bus_seq_key, dependent_keys...
-- ARGV: token, output, duration_ms, detail, announcer, announcement
local task_key, ready_key, running_key, counts_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local heartbeat_key, events_key, bus_key, bus_seq_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local dependent_keys_from = 9  -- KEYS[dependent_keys_from..]
local token, output, duration_ms, detail, announcer = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local announcement = ARGV[6]
local verdict = check_token(task_key, token)
if verdict ~= OK then return verdict end
local now = now_ms()
local tid = redis.call('HGET', task_key, 'task_id')
complete_task(task_key, ready_key, running_key, counts_key, keys_from(dependent_keys_from),
  output, detail, duration_ms, now)
redis.call('DEL', heartbeat_key)
if announcer ~= '' then
  publish_message(bus_key, bus_seq_key, {}, announcer, 'lead', 'task.result', tid, announcement,
    now)
end
task_event(events_key, task_key, 'completed', token)
return OK
