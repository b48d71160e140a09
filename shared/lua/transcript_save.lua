-- transcript_save: keep a member's transcript of a task, only while its claim holds: a stale
-- attempt's transcript never replaces the one of the attempt that owns the task.
-- KEYS[1] task hash, KEYS[2] transcript key.
-- ARGV[1] token, ARGV[2] transcript JSON.
-- Returns 1 applied, -1 stale token, -2 the claim already ended, 0 no such task.
local verdict = check_token(KEYS[1], ARGV[1])
if verdict ~= APPLIED then return verdict end
redis.call('SET', KEYS[2], ARGV[2])
inherit_ttl(KEYS[2], KEYS[1])
return APPLIED
