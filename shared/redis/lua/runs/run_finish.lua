-- run_finish: end a run, fenced by the coordinator lease: state, usage, announcement and the
-- first expiries in one step, so a coordinator that lost its lease (cut off, then resumed
-- elsewhere) writes nothing, and a run is never finished twice.
-- KEYS[1] lease, KEYS[2] state hash, KEYS[3] usage hash, KEYS[4] bus stream, KEYS[5] bus sequence,
-- KEYS[6] events stream (a `run.end` wake-up there: whoever waits for the end blocks on it).
-- ARGV[1] lease owner, ARGV[2] final status, ARGV[3] output ('' with ARGV[4] '0': none),
-- ARGV[4] '1' if ARGV[3] is an output, ARGV[5] error ('' none), ARGV[6] prompt tokens,
-- ARGV[7] completion tokens, ARGV[8] cost usd, ARGV[9] '1' if unpriced, ARGV[10] message type
-- to announce to lead ('' none), ARGV[11] its content, ARGV[12] retention ms.
-- Returns 'ok' if the run was ended, 'stale' if the lease is not ours, 'ended' if the run had already
-- ended.
-- uses: core, runs, tasks, messages
-- access: write
-- KEYS: lease_key, state_key, usage_key, bus_key, bus_seq_key, events_key
-- ARGV: owner, status, output, has_output, error_text, prompt_tokens, completion_tokens, cost_usd,
--   unpriced, announce_type, announcement, retention_ms
local lease_key, state_key, usage_key, bus_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local bus_seq_key, events_key = KEYS[5], KEYS[6]
local owner, status, output, has_output, error_text = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local prompt_tokens, completion_tokens, cost_usd, unpriced = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local announce_type, announcement, retention_ms = ARGV[10], ARGV[11], ARGV[12]
if RUN_ENDED[redis.call('HGET', state_key, 'status') or ''] then return 'ended' end
if redis.call('GET', lease_key) ~= owner then return 'stale' end
local now = now_ms()
redis.call('HSET', state_key, 'status', status, 'ended_ms', now)
if has_output == '1' then redis.call('HSET', state_key, 'output', output) end
if error_text ~= '' then redis.call('HSET', state_key, 'error', error_text) end
redis.call('HINCRBY', usage_key, 'prompt_tokens', prompt_tokens)
redis.call('HINCRBY', usage_key, 'completion_tokens', completion_tokens)
redis.call('HINCRBYFLOAT', usage_key, 'cost_usd', cost_usd)
if unpriced == '1' then redis.call('HSET', usage_key, 'unpriced', 1) end
if announce_type ~= '' then
  publish_message(bus_key, bus_seq_key, {}, 'system', 'lead', announce_type, '', announcement, now)
end
event(events_key, '', 'run.end', 0)
-- The bus first: keys a late message creates inherit its TTL (shared/runs/retention.py does the rest).
for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], retention_ms) end
return 'ok'
