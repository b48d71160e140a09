-- turn_heartbeat: keep a live turn's lease, if the token still holds it.
-- KEYS[1] the turn key, KEYS[2] the mate hash. ARGV[1] token, ARGV[2] lease TTL ms.
-- Returns 'ok' when refreshed, 'stale' when the turn was revoked (its lease expired or was
-- retaken).
-- uses: core
-- access: write
-- KEYS: turn_key, mate_key
-- ARGV: token, lease_ttl_ms
local turn_key, mate_key = KEYS[1], KEYS[2]
local token, lease_ttl_ms = ARGV[1], ARGV[2]
if redis.call('GET', turn_key) ~= token then return 'stale' end
redis.call('PEXPIRE', turn_key, lease_ttl_ms)
redis.call('HSET', mate_key, 'last_seen_ms', now_ms())
return 'ok'
