-- heartbeat: extend a live claim; only the holder of the current token may.
-- KEYS[1] task hash, KEYS[2] heartbeat key.
-- ARGV[1] token, ARGV[2] heartbeat ttl ms, ARGV[3] '1' to count it (a visible AI4J heartbeat,
-- phase "heartbeat") or '0' for the worker's silent keep-alive, ARGV[4] member id for the detail.
-- Returns 1, or -1 for a stale token (recorded in stale_writes).
local now = now_ms()
if redis.call('HGET', KEYS[1], 'status') ~= 'in_progress'
   or redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  redis.call('HINCRBY', KEYS[1], 'stale_writes', 1)
  return -1
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[1], 'last_heartbeat_ms', now)
if ARGV[3] == '1' then
  redis.call('HINCRBY', KEYS[1], 'heartbeat_count', 1)
  redis.call('HSET', KEYS[1], 'phase', 'heartbeat', 'detail', 'Heartbeat from ' .. ARGV[4] .. '.',
    'updated_ms', now)
  raise_percent(KEYS[1], 15)
end
return 1
