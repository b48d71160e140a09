-- reclaim: take back a claim whose heartbeat key expired: ready again, or failed after max attempts.
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream, KEYS[7..] the task's dependents closure.
-- ARGV[1] max attempts.
-- Returns 1 if returned to ready, 2 if failed, 0 if the claim is alive or the task not in progress.
if redis.call('HGET', KEYS[1], 'status') ~= 'in_progress' then return 0 end
if redis.call('EXISTS', KEYS[5]) == 1 then return 0 end
local now = now_ms()
local tid = redis.call('HGET', KEYS[1], 'task_id')
local attempts = tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0')
redis.call('SREM', KEYS[3], tid)
-- A new token value invalidates the stale holder's token without issuing a claim.
redis.call('HSET', KEYS[1], 'token', 'reclaimed:' .. redis.call('HGET', KEYS[1], 'token'))
if attempts >= tonumber(ARGV[1]) then
  local reason = 'claim expired after ' .. attempts .. ' attempts'
  set_status(KEYS[1], KEYS[4], 'failed')
  redis.call('HSET', KEYS[1], 'phase', 'failed', 'detail', reason, 'error', reason,
    'percent', 100, 'end_ms', now, 'updated_ms', now)
  block_dependents(7, KEYS[2], KEYS[4], KEYS[6], now)
  event(KEYS[6], tid, 'failed', 0)
  return 2
end
redis.call('HSET', KEYS[1], 'claimed_by', '', 'worker', '', 'start_ms', 0, 'last_heartbeat_ms', 0,
  'updated_ms', now)
make_ready(KEYS[1], KEYS[2], KEYS[4], 'Ready for dispatch.')
event(KEYS[6], tid, 'reclaimed', 0)
return 1
