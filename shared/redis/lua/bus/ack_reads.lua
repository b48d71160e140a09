-- ack_reads: an attempt's model has been given what it read (or the attempt ended with an
-- outcome), so drop the attempt's records of unacknowledged reads: nothing in them is delivered
-- again. Fenced: only while ARGV[1] is the task's live claim, so a stale attempt cannot
-- acknowledge what the next attempt of the task must get again.
-- KEYS[1] unacknowledged reads hash, KEYS[2] task hash.
-- ARGV[1] token, ARGV[2] task id, ARGV[3..] the members whose record for the task to drop.
-- Returns 1 acknowledged, 0 refused (the token is not the task's live claim).
local current = redis.call('HMGET', KEYS[2], 'token', 'status')
if current[1] ~= ARGV[1] or current[2] ~= 'in_progress' then return 0 end
for i = 3, #ARGV do
  redis.call('HDEL', KEYS[1], ARGV[i] .. ':' .. ARGV[2])
end
return 1
