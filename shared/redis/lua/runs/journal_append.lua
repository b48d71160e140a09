-- journal_append: add entries to a task's step journal, only while the writer's claim holds, so a
-- stale attempt (reclaimed, partitioned) never adds to what the next attempt replays.
-- KEYS[1] task hash, KEYS[2] journal list.
-- ARGV[1] token, ARGV[2] op: 'append' (ARGV[3] the entry's JSON, ARGV[4] the journal's cap in
-- bytes), 'reset' (drop the journal: it was another member's session), 'trim' (keep its first
-- ARGV[3] entries: what a forked run copied from its source, before a session it released), or
-- 'replayed' (ARGV[3] how many steps this attempt replayed, kept on the task as replayed_steps).
-- The journal's size is kept on the task (journal_bytes), so no call walks the list; a journal that
-- reached its cap is marked on the task (journal_cut), for a fork to say what it pays again.
-- Returns 'ok' (done), 'stale' (refused: a stale token, or the claim ended) or 'full' (the entry
-- was not added: the journal keeps its prefix, and replay stops there).
-- uses: core
-- access: write
-- KEYS: task_key, journal_key
-- ARGV: token, op, value?, cap_bytes?
local task_key, journal_key = KEYS[1], KEYS[2]
local token, op, value, cap_bytes = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local current = redis.call('HMGET', task_key, 'token', 'status', 'journal_bytes')
if current[1] ~= token or token == '0' or current[2] ~= 'in_progress' then return 'stale' end
if op == 'reset' then
  redis.call('DEL', journal_key)
  redis.call('HSET', task_key, 'journal_bytes', 0, 'replayed_steps', 0, 'journal_cut', 0)
  return 'ok'
end
if op == 'trim' then
  if tonumber(value) > 0 then
    redis.call('LTRIM', journal_key, 0, tonumber(value) - 1)
  else
    redis.call('DEL', journal_key)
  end
  redis.call('HSET', task_key, 'journal_bytes', 0, 'replayed_steps', 0, 'journal_cut', 0)
  return 'ok'
end
if op == 'replayed' then
  redis.call('HSET', task_key, 'replayed_steps', value)
  return 'ok'
end
local chars = tonumber(current[3] or '0') + #value
if chars > tonumber(cap_bytes) then
  redis.call('HSET', task_key, 'journal_cut', 1)
  return 'full'
end
redis.call('RPUSH', journal_key, value)
redis.call('HSET', task_key, 'journal_bytes', chars)
inherit_ttl(journal_key, task_key)
return 'ok'
