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
set_status(task_key, counts_key, 'completed')
redis.call('HSET', task_key, 'phase', 'completed', 'detail', detail, 'percent', 100,
  'output', result, 'error', '', 'duration_ms', now - tonumber(f[3] or now), 'end_ms', now,
  'last_heartbeat_ms', now, 'updated_ms', now)
redis.call('SREM', running_key, tid)
local out = {'ok', ''}
for i = dependent_keys_from, #KEYS do
  local left = redis.call('HINCRBY', KEYS[i], 'deps_left', -1)
  if left <= 0 and redis.call('HGET', KEYS[i], 'status') == 'pending' then
    make_ready(KEYS[i], ready_key, counts_key)
    out[#out + 1] = redis.call('HGET', KEYS[i], 'task_id')
  end
end
publish_message(bus_key, bus_seq_key, {lead_inbox_key}, name, 'lead', 'task.result', tid, result,
  now)
task_event(events_key, task_key, 'completed', f[4])
return out
