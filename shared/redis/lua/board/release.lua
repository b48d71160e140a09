-- release: the holder gives its claim back; the task is ready (or pending) again and the token
-- is revoked, so the holder's later writes are refused as stale.
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream.
-- ARGV[1] token, ARGV[2] reason ('' = none).
-- Returns 1 applied, -1 stale token (counted in stale_writes), -2 the claim already ended,
-- 0 no such task.
-- uses: core, tasks
-- access: write
-- KEYS: task_key, ready_key, running_key, counts_key, heartbeat_key, events_key
-- ARGV: token, reason
local verdict = check_token(KEYS[1], ARGV[1])
if verdict ~= APPLIED then return verdict end
local reason = ARGV[2]
if reason == '' then reason = 'Released back to queue.' end
requeue(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], reason, now_ms())
task_event(KEYS[6], KEYS[1], 'released', ARGV[1])
return APPLIED
