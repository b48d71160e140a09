-- release: the holder gives its claim back; the task is ready (or pending) again and the token
-- is revoked, so the holder's later writes are refused as stale.
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream.
-- ARGV[1] token, ARGV[2] reason ('' = none).
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
if reason == '' then reason = 'Released back to queue.' end
release_claim(task_key, ready_key, running_key, counts_key, heartbeat_key, events_key, token,
  reason, now_ms())
return OK
