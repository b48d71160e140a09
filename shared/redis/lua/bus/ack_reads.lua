-- ack_reads: an attempt's model has been given what it read (or the attempt ended with an
-- outcome), so drop from the attempt's records of unacknowledged reads what it was given: nothing
-- of that is delivered again. Messages a bounded read left in a record (past its `given`) stay
-- owed, for the attempt's next read. Fenced: only while ARGV[1] is the task's live claim, so a
-- stale attempt cannot acknowledge what the next attempt of the task must get again.
-- KEYS[1] unacknowledged reads hash, KEYS[2] task hash.
-- ARGV[1] token, ARGV[2] task id, ARGV[3] '1' to drop the records whole (the task ended with an
-- outcome: nothing is owed to it any more), ARGV[4..] the members whose record for the task.
-- Returns 'ok' (acknowledged) or 'stale' (refused: the token is not the task's live claim).
-- access: write
-- KEYS: unacked_key, task_key
-- ARGV: token, task_id, drop_whole, members...
local unacked_key, task_key = KEYS[1], KEYS[2]
local token, task_id, drop_whole = ARGV[1], ARGV[2], ARGV[3]
local members_from = 4  -- ARGV[members_from..]
local current = redis.call('HMGET', task_key, 'token', 'status')
if current[1] ~= token or current[2] ~= 'in_progress' then return 'stale' end
for i = members_from, #ARGV do
  local field = ARGV[i] .. ':' .. task_id
  local raw = redis.call('HGET', unacked_key, field)
  local record = raw and cjson.decode(raw)
  if record and drop_whole ~= '1' and record.given and record.given < #record.ids then
    local owed = {}
    for n = record.given + 1, #record.ids do owed[#owed + 1] = record.ids[n] end
    record.ids, record.given = owed, 0
    redis.call('HSET', unacked_key, field, cjson.encode(record))
  elseif raw then
    redis.call('HDEL', unacked_key, field)
  end
end
return 'ok'
