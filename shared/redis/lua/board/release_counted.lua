-- release_counted: team_release_task in a planned run: the holder gives its claim back, counted
-- against the run's max_task_releases. Within the bound as release.lua (ready or pending again,
-- the token revoked); past it only the history changes and the claim stays live: the caller
-- fails the task with the error returned (fail.lua: dependents blocked, the lead told once).
-- KEYS[1] task hash, KEYS[2] ready zset, KEYS[3] running set, KEYS[4] counts hash,
-- KEYS[5] heartbeat key, KEYS[6] events stream.
-- ARGV[1] token, ARGV[2] reason (the runtime's words, quoting the member's printable-checked
-- in Python: never one the runtime acts on), ARGV[3] the releasing member, ARGV[4] max releases.
-- Returns {verdict, error}: 1 released, 2 past the bound (error: what to fail it with),
-- -1 stale token (counted in stale_writes), -2 the claim already ended, 0 no such task.
-- uses: core, tasks, releases
-- access: write
-- KEYS: task_key, ready_key, running_key, counts_key, heartbeat_key, events_key
-- ARGV: token, reason, member, max_releases
local verdict = check_token(KEYS[1], ARGV[1])
if verdict ~= APPLIED then return {verdict, ''} end
if note_release(KEYS[1], ARGV[3], ARGV[4]) then
  return {2, releases_error(KEYS[1], 'max_task_releases')}
end
requeue(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], now_ms())
task_event(KEYS[6], KEYS[1], 'released', ARGV[1])
return {APPLIED, ''}
