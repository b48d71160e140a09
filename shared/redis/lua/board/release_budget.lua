-- release_budget: the run's budget cannot cover the holder's next model call, so its claim goes
-- back for later: ready (or pending) again and the token revoked, like release.lua, but the
-- attempt is not counted (the claim's increment is undone), it is no release against
-- max_task_releases, and `reclaimed` is set so the next attempt replays the task's journal
-- (the steps already paid for) instead of paying for them again.
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream.
-- ARGV[1] token, ARGV[2] reason (the budget's words).
-- Returns 1 applied, -1 stale token (counted in stale_writes), -2 the claim already ended,
-- 0 no such task.
-- uses: core, tasks
-- access: write
-- KEYS: task_key, ready_key, running_key, counts_key, heartbeat_key, events_key
-- ARGV: token, reason
local verdict = check_token(KEYS[1], ARGV[1])
if verdict ~= APPLIED then return verdict end
requeue(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], now_ms())
local attempts = tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0') or 0
if attempts > 0 then redis.call('HSET', KEYS[1], 'attempts', attempts - 1) end
redis.call('HSET', KEYS[1], 'reclaimed', 1, 'phase', 'awaiting budget', 'detail', ARGV[2])
task_event(KEYS[6], KEYS[1], 'released', ARGV[1])
return APPLIED
