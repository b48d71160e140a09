-- release_budget: the run's budget cannot cover the holder's next model call, so its claim goes
-- back for later: ready (or pending) again and the token revoked, like release.lua, but the
-- attempt is not counted (the claim's increment is undone), it is no release against
-- max_task_releases, and `reclaimed` is set so the next attempt replays the task's journal
-- (the steps already paid for) instead of paying for them again.
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream.
-- ARGV[1] token, ARGV[2] reason (the budget's words).
-- Returns 'ok' (applied), 'stale' (a stale token, counted in stale_writes), 'conflict' (the
-- claim already ended) or 'unknown' (no such task).
-- uses: core, tasks
-- access: write
-- KEYS: task_key, ready_key, running_key, counts_key, heartbeat_key, events_key
-- ARGV: token, reason
local task_key, ready_key, running_key, counts_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local heartbeat_key, events_key = KEYS[5], KEYS[6]
local token, reason = ARGV[1], ARGV[2]
local verdict = check_token(task_key, token)
if verdict ~= OK then return verdict end
local attempts = tonumber(redis.call('HGET', task_key, 'attempts') or '0') or 0
if attempts > 0 then redis.call('HSET', task_key, 'attempts', attempts - 1) end
release_claim(task_key, ready_key, running_key, counts_key, heartbeat_key, events_key, token,
  reason, now_ms())
-- After the release, which clears `reclaimed` and sets the requeue's phase.
redis.call('HSET', task_key, 'reclaimed', 1, 'phase', 'awaiting budget', 'detail', reason)
return OK
