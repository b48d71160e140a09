-- lease_renew: extend the coordinator lease for the coordinator that holds it, or take it back
-- if it lapsed while nobody else took it (a Redis outage longer than the TTL).
-- KEYS[1] lease key. ARGV[1] owner (host:pid:nonce), ARGV[2] ttl ms.
-- Returns 1 if renewed, 2 if taken back, 0 if another coordinator holds it.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 2
