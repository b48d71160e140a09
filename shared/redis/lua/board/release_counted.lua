-- release_counted: team_release_task in a planned run: the holder gives its claim back, counted
-- against the run's max_task_releases. Within the bound as release.lua (ready or pending again,
-- the token revoked); past it only the history changes and the claim stays live: the caller
-- fails the task with the error returned (fail.lua: dependents blocked, the lead told once).
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream.
-- ARGV[1] token, ARGV[2] reason (the runtime's words, quoting the member's printable-checked
-- in Python: never one the runtime acts on), ARGV[3] the releasing member, ARGV[4] max releases.
-- Returns {verdict, error}: 'ok' (released), 'past_bound' (error: what to fail it with),
-- 'stale' (a stale token, counted in stale_writes), 'conflict' (the claim already ended) or
-- 'unknown' (no such task).
-- uses: core, tasks, releases
-- access: write
-- KEYS: task_key, ready_key, running_key, counts_key, heartbeat_key, events_key
-- ARGV: token, reason, member, max_releases
local task_key, ready_key, running_key, counts_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local heartbeat_key, events_key = KEYS[5], KEYS[6]
local token, reason, member, max_releases = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local verdict = check_token(task_key, token)
if verdict ~= OK then return {verdict, ''} end
if note_release(task_key, member, max_releases) then
  return {'past_bound', releases_error(task_key, 'max_task_releases')}
end
release_claim(task_key, ready_key, running_key, counts_key, heartbeat_key, events_key, token,
  reason, now_ms())
return {OK, ''}
