-- run_status: move a run to a non-final status (awaiting_approval, running, synthesizing), fenced
-- by the coordinator lease, so a coordinator that lost its lease never rewinds a run.
-- KEYS[1] lease, KEYS[2] state hash. ARGV[1] lease owner, ARGV[2] status.
-- Returns 'ok' if set, 'stale' if the lease is not ours, 'ended' if the run had already
-- ended.
-- uses: runs
-- access: write
-- KEYS: lease_key, state_key
-- ARGV: owner, status
local lease_key, state_key = KEYS[1], KEYS[2]
local owner, status = ARGV[1], ARGV[2]
if RUN_ENDED[redis.call('HGET', state_key, 'status') or ''] then return 'ended' end
if redis.call('GET', lease_key) ~= owner then return 'stale' end
redis.call('HSET', state_key, 'status', status)
return 'ok'
