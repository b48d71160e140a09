-- heartbeat: extend a live claim; only the holder of the current token may.
-- KEYS[1] task hash, KEYS[2] heartbeat key.
-- ARGV[1] token, ARGV[2] heartbeat ttl ms, ARGV[3] '1' to count it (a visible AI4J heartbeat,
-- phase "heartbeat") or '0' for the worker's silent keep-alive, ARGV[4] member id for the detail
-- ('' = the claimer).
-- Returns 1 applied, -1 stale token (counted in stale_writes), -2 the claim already ended,
-- 0 no such task.
-- uses: core, tasks
-- access: write
-- KEYS: task_key, heartbeat_key
-- ARGV: token, heartbeat_ttl_ms, counted, member
local verdict = check_token(KEYS[1], ARGV[1])
if verdict ~= APPLIED then return verdict end
local now = now_ms()
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[1], 'last_heartbeat_ms', now, 'heartbeat_ttl_ms', ARGV[2])
if ARGV[3] == '1' then
  local who = ARGV[4]
  if who == '' then who = redis.call('HGET', KEYS[1], 'claimed_by') end
  if who == '' then who = 'member' end
  redis.call('HINCRBY', KEYS[1], 'heartbeat_count', 1)
  redis.call('HSET', KEYS[1], 'phase', 'heartbeat', 'detail', 'Heartbeat from ' .. who .. '.',
    'updated_ms', now)
  raise_percent(KEYS[1], 15)
end
return APPLIED
