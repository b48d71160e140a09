-- heartbeat: extend a live claim; only the holder of the current token may.
-- KEYS[1] task hash, KEYS[2] heartbeat key.
-- ARGV[1] token, ARGV[2] heartbeat ttl ms, ARGV[3] '1' to count it (a visible AI4J heartbeat,
-- phase "heartbeat") or '0' for the worker's silent keep-alive, ARGV[4] member id for the detail
-- ('' = the claimer).
-- Returns 'ok' (applied), 'stale' (a stale token, counted in stale_writes), 'conflict' (the
-- claim already ended) or 'unknown' (no such task).
-- uses: core, tasks
-- access: write
-- KEYS: task_key, heartbeat_key
-- ARGV: token, heartbeat_ttl_ms, counted, member
local task_key, heartbeat_key = KEYS[1], KEYS[2]
local token, heartbeat_ttl_ms, counted, member = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local verdict = check_token(task_key, token)
if verdict ~= OK then return verdict end
local now = now_ms()
redis.call('SET', heartbeat_key, token, 'PX', heartbeat_ttl_ms)
redis.call('HSET', task_key, 'last_heartbeat_ms', now, 'heartbeat_ttl_ms', heartbeat_ttl_ms)
if counted == '1' then
  local who = member
  if who == '' then who = redis.call('HGET', task_key, 'claimed_by') end
  if who == '' then who = 'member' end
  redis.call('HINCRBY', task_key, 'heartbeat_count', 1)
  redis.call('HSET', task_key, 'phase', 'heartbeat', 'detail', 'Heartbeat from ' .. who .. '.',
    'updated_ms', now)
  raise_percent(task_key, 15)
end
return OK
