-- lease_release: drop the coordinator lease, only for the coordinator that holds it.
-- KEYS[1] lease key. ARGV[1] owner (host:pid:nonce).
-- Returns 1 if released, 0 if it was gone or held by another coordinator.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
