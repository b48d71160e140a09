-- request_read: one request record, marked expired first when it is pending past its deadline
-- (expiry needs no timer: whoever reads or resolves the record applies it).
-- KEYS[1] the request hash, KEYS[2] the team's events stream.
-- Returns the record as HGETALL does (empty when there is no such request).
-- uses: core, events
-- access: read
-- KEYS: request_key, events_key
-- ARGV: none
local request_key, events_key = KEYS[1], KEYS[2]
local f = redis.call('HMGET', request_key, 'status', 'deadline_ms')
if f[1] == 'pending' then
  local now = now_ms()
  if now > tonumber(f[2]) then
    redis.call('HSET', request_key, 'status', 'expired', 'resolved_ms', now, 'resolved_by',
      'system')
    request_event(events_key, redis.call('HGET', request_key, 'id'), 'expired',
      redis.call('HGET', request_key, 'kind'))
  end
end
return redis.call('HGETALL', request_key)
