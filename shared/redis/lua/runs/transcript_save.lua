-- transcript_save: keep a member's transcript of a task, only while its claim holds: a stale
-- attempt's transcript never replaces the one of the attempt that owns the task. A refusal is
-- not counted in stale_writes: the outcome write that follows it is, once.
-- KEYS[1] task hash, KEYS[2] transcript key.
-- ARGV[1] token, ARGV[2] transcript JSON ('' = this attempt has none: an earlier attempt's is
-- removed, so it never sits beside this attempt's outcome).
-- Returns 'ok' (applied) or 'stale' (refused: a stale token, the claim ended, or no such task).
-- uses: core
-- access: write
-- KEYS: task_key, transcript_key
-- ARGV: token, transcript
local task_key, transcript_key = KEYS[1], KEYS[2]
local token, transcript = ARGV[1], ARGV[2]
local current = redis.call('HMGET', task_key, 'token', 'status')
if current[1] ~= token or token == '0' or current[2] ~= 'in_progress' then return 'stale' end
if transcript == '' then
  redis.call('DEL', transcript_key)
  return 'ok'
end
redis.call('SET', transcript_key, transcript)
inherit_ttl(transcript_key, task_key)
return 'ok'
