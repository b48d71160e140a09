-- request_read: one request record, marked expired first when it is pending past its deadline
-- (expiry needs no timer: whoever reads or resolves the record applies it).
-- KEYS[1] the request hash, KEYS[2] the team's events stream.
-- Returns the record as HGETALL does (empty when there is no such request).
-- uses: core, events
-- access: read
-- KEYS: request_key, events_key
-- ARGV: none
local f = redis.call('HMGET', KEYS[1], 'status', 'deadline_ms')
if f[1] == 'pending' then
  local now = now_ms()
  if now > tonumber(f[2]) then
    redis.call('HSET', KEYS[1], 'status', 'expired', 'resolved_ms', now, 'resolved_by', 'system')
    request_event(KEYS[2], redis.call('HGET', KEYS[1], 'id'), 'expired',
      redis.call('HGET', KEYS[1], 'kind'))
  end
end
return redis.call('HGETALL', KEYS[1])
