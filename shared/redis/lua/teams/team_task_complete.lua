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
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'stale', ''} end
local f = redis.call('HMGET', KEYS[2], 'status', 'claimed_by', 'start_ms', 'token', 'task_id',
  'dependents')
if not f[1] then return {'unknown', ''} end
if f[1] ~= 'in_progress' or f[2] ~= ARGV[2] then return {'not_yours', f[1], f[2] or ''} end
if (f[6] or '') ~= ARGV[5] then return {'retry', ''} end
local now = now_ms()
local tid = f[5]
set_status(KEYS[2], KEYS[5], 'completed')
redis.call('HSET', KEYS[2], 'phase', 'completed', 'detail', ARGV[4], 'percent', 100,
  'output', ARGV[3], 'error', '', 'duration_ms', now - tonumber(f[3] or now), 'end_ms', now,
  'last_heartbeat_ms', now, 'updated_ms', now)
redis.call('SREM', KEYS[4], tid)
local out = {'ok', ''}
for i = 10, #KEYS do
  local left = redis.call('HINCRBY', KEYS[i], 'deps_left', -1)
  if left <= 0 and redis.call('HGET', KEYS[i], 'status') == 'pending' then
    make_ready(KEYS[i], KEYS[3], KEYS[5])
    out[#out + 1] = redis.call('HGET', KEYS[i], 'task_id')
  end
end
publish_message(KEYS[7], KEYS[8], 9, 9, ARGV[2], 'lead', 'task.result', tid, ARGV[3], now)
task_event(KEYS[6], KEYS[2], 'completed', f[4])
return out
