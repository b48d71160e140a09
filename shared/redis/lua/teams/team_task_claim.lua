-- team_task_claim: a teammate's turn claims a ready task (claim_task), token-checked.
-- KEYS[1] the turn key, KEYS[2] the mate hash, KEYS[3] the task hash, KEYS[4] ready zset,
-- KEYS[5] running set, KEYS[6] counts hash, KEYS[7] token counter, KEYS[8] events stream.
-- ARGV[1] the turn's token, ARGV[2] teammate name.
-- Returns {verdict, detail}: 'ok'; 'stale' (the turn was revoked); 'unknown' (no such task);
-- 'held' (detail: its holder); 'not_ready' (detail: its status); 'reserved' (detail: the
-- assignee); 'role' (detail: the task's role). Only 'ok' writes.
-- uses: core, team
-- access: write
-- KEYS: turn_key, mate_key, task_key, ready_key, running_key, counts_key, tokens_key, events_key
-- ARGV: token, name
local turn_key, mate_key, task_key, ready_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local running_key, counts_key, tokens_key, events_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local token, name = ARGV[1], ARGV[2]
if redis.call('GET', turn_key) ~= token then return {'stale', ''} end
local f = redis.call('HMGET', task_key, 'status', 'claimed_by', 'member_id', 'role')
if not f[1] then return {'unknown', ''} end
if f[1] == 'in_progress' then return {'held', f[2]} end
if f[1] ~= 'ready' then return {'not_ready', f[1]} end
if f[3] ~= '' and f[3] ~= name then return {'reserved', f[3]} end
if not team_task_fits(task_key, name, redis.call('HGET', mate_key, 'role'), false) then
  return {'role', f[4]}
end
team_claim(task_key, ready_key, running_key, counts_key, tokens_key, events_key, name, now_ms())
return {'ok', ''}
