-- run_finish: end a run, fenced by the coordinator lease: state, usage, announcement and the
-- first expiries in one step, so a coordinator that lost its lease (cut off, then resumed
-- elsewhere) writes nothing, and a run is never finished twice.
-- KEYS[1] lease, KEYS[2] state hash, KEYS[3] usage hash, KEYS[4] bus stream, KEYS[5] bus sequence,
-- KEYS[6] events stream (a `run.end` wake-up there: whoever waits for the end blocks on it).
-- ARGV[1] lease owner, ARGV[2] final status, ARGV[3] output ('' with ARGV[4] '0': none),
-- ARGV[4] '1' if ARGV[3] is an output, ARGV[5] error ('' none), ARGV[6] prompt tokens,
-- ARGV[7] completion tokens, ARGV[8] cost usd, ARGV[9] '1' if unpriced, ARGV[10] message type
-- to announce to lead ('' none), ARGV[11] its content, ARGV[12] retention ms.
-- Returns 1 if the run was ended, 0 if the lease is not ours, -1 if the run had already ended.
-- uses: core, runs, tasks, messages
-- access: write
-- KEYS: lease_key, state_key, usage_key, bus_key, bus_seq_key, events_key
-- ARGV: owner, status, output, has_output, error, prompt_tokens, completion_tokens, cost_usd,
--   unpriced, announce_type, announcement, retention_ms
if RUN_ENDED[redis.call('HGET', KEYS[2], 'status') or ''] then return -1 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local now = now_ms()
redis.call('HSET', KEYS[2], 'status', ARGV[2], 'ended_ms', now)
if ARGV[4] == '1' then redis.call('HSET', KEYS[2], 'output', ARGV[3]) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], 'error', ARGV[5]) end
redis.call('HINCRBY', KEYS[3], 'prompt_tokens', ARGV[6])
redis.call('HINCRBY', KEYS[3], 'completion_tokens', ARGV[7])
redis.call('HINCRBYFLOAT', KEYS[3], 'cost_usd', ARGV[8])
if ARGV[9] == '1' then redis.call('HSET', KEYS[3], 'unpriced', 1) end
if ARGV[10] ~= '' then
  publish_message(KEYS[4], KEYS[5], 1, 0, 'system', 'lead', ARGV[10], '', ARGV[11], now)
end
event(KEYS[6], '', 'run.end', 0)
-- The bus first: keys a late message creates inherit its TTL (shared/runs/retention.py does the rest).
for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[12]) end
return 1
