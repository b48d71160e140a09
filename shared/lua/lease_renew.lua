-- lease_renew: extend the coordinator lease, only for the coordinator that holds it.
-- KEYS[1] lease key. ARGV[1] owner (host:pid:nonce), ARGV[2] ttl ms.
-- Returns 1 if renewed, 0 if the lease is gone or held by another coordinator.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
