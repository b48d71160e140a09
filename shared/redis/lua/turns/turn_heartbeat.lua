-- turn_heartbeat: keep a live turn's lease, if the token still holds it.
-- KEYS[1] the turn key, KEYS[2] the mate hash. ARGV[1] token, ARGV[2] lease TTL ms.
-- Returns 1 when refreshed, 0 when the turn was revoked (its lease expired or was retaken).
-- uses: core
-- access: write
-- KEYS: turn_key, mate_key
-- ARGV: token, lease_ttl_ms
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], 'last_seen_ms', now_ms())
return 1
