-- turn_begin: take a teammate's turn lease for one job.
-- KEYS[1] the mate hash, KEYS[2] its turn key, KEYS[3] the team's token counter.
-- ARGV[1] lease TTL ms, ARGV[2] the worker (host:pid, recorded for people and tests).
-- Returns {'ok', token} with the lease set to the new token; {'busy', ''} while another turn
-- holds the lease; {'skip', ''} when the teammate is not working (a duplicate or late job).
-- uses: core
-- access: write
-- KEYS: mate_key, turn_key, tokens_key
-- ARGV: lease_ttl_ms, worker
local mate_key, turn_key, tokens_key = KEYS[1], KEYS[2], KEYS[3]
local lease_ttl_ms, worker = ARGV[1], ARGV[2]
if redis.call('HGET', mate_key, 'status') ~= 'working' then return {'skip', ''} end
if redis.call('EXISTS', turn_key) == 1 then return {'busy', ''} end
local token = fencing_token(tokens_key)
redis.call('SET', turn_key, token, 'PX', lease_ttl_ms)
-- job_id names a turn job not begun yet (reconcile leaves a queued one alone); this one began.
redis.call('HSET', mate_key, 'turn_token', token, 'last_seen_ms', now_ms(), 'worker', worker,
  'job_id', '')
return {'ok', token}
