-- team_task_complete: a teammate's turn completes a task it holds (complete_task), token-checked:
-- the result, the dependents whose last dependency this was made ready, and a task.result
-- message to the lead, in one step.
-- KEYS[1] the turn key, KEYS[2] the task hash, KEYS[3] ready zset, KEYS[4] running set,
-- KEYS[5] counts hash, KEYS[6] events stream, KEYS[7] bus stream, KEYS[8] bus sequence counter,
-- KEYS[9] the lead's inbox, KEYS[10..] the task's dependents' hashes.
-- ARGV[1] the turn's token, ARGV[2] teammate name, ARGV[3] result, ARGV[4] detail (the result
-- shortened in Python: Lua would cut UTF-8 bytes), ARGV[5] the dependents csv the caller read.
-- Returns {verdict, detail, ...}: {'ok', '', ready ids...}; 'stale' (the turn was revoked);
-- 'unknown' (no such task); 'not_yours' (detail: status, then the holder); 'retry' (a task was
-- added after this one since the caller read its dependents). Only 'ok' writes.
-- uses: core, tasks, messages
-- access: write
-- KEYS: turn_key, task_key, ready_key, running_key, counts_key, events_key, bus_key, bus_seq_key,
--   lead_inbox_key, dependent_keys...
-- ARGV: token, name, result, detail, dependents_csv
local turn_key, task_key, ready_key, running_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local counts_key, events_key, bus_key, bus_seq_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local lead_inbox_key = KEYS[9]
local dependent_keys_from = 10  -- KEYS[dependent_keys_from..]
local token, name, result, detail, dependents_csv = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('GET', turn_key) ~= token then return {'stale', ''} end
local f = redis.call('HMGET', task_key, 'status', 'claimed_by', 'start_ms', 'token', 'task_id',
  'dependents')
if not f[1] then return {'unknown', ''} end
if f[1] ~= 'in_progress' or f[2] ~= name then return {'not_yours', f[1], f[2] or ''} end
if (f[6] or '') ~= dependents_csv then return {'retry', ''} end
local now = now_ms()
local tid = f[5]
local ready = complete_task(task_key, ready_key, running_key, counts_key,
  keys_from(dependent_keys_from), result, detail, now - tonumber(f[3] or now), now)
publish_message(bus_key, bus_seq_key, {lead_inbox_key}, name, 'lead', 'task.result', tid, result,
  now)
task_event(events_key, task_key, 'completed', f[4])
local out = {'ok', ''}
for _, tid_ready in ipairs(ready) do out[#out + 1] = tid_ready end
return out
