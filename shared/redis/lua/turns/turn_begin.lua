-- turn_begin: take a teammate's turn lease for one job.
-- KEYS[1] the mate hash, KEYS[2] its turn key, KEYS[3] the team's token counter.
-- ARGV[1] lease TTL ms, ARGV[2] the worker (host:pid, recorded for people and tests).
-- Returns {'ok', token} with the lease set to the new token; {'busy', ''} while another turn
-- holds the lease; {'skip', ''} when the teammate is not working (a duplicate or late job).
-- uses: core
-- access: write
-- KEYS: mate_key, turn_key, tokens_key
-- ARGV: lease_ttl_ms, worker
if redis.call('HGET', KEYS[1], 'status') ~= 'working' then return {'skip', ''} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'busy', ''} end
local token = fencing_token(KEYS[3])
redis.call('SET', KEYS[2], token, 'PX', ARGV[1])
-- job_id names a turn job not begun yet (reconcile leaves a queued one alone); this one began.
redis.call('HSET', KEYS[1], 'turn_token', token, 'last_seen_ms', now_ms(), 'worker', ARGV[2],
  'job_id', '')
return {'ok', token}
