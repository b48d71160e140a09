-- read_unread: return a member's inbox entries after its read offset and advance the offset,
-- in one step, so concurrent readers of one member never get the same message twice.
-- KEYS[1] the member's inbox stream, KEYS[2] read offsets hash.
-- ARGV[1] member id, ARGV[2] max entries to return.
-- Returns the entries as XRANGE does.
local offset = redis.call('HGET', KEYS[2], ARGV[1]) or '0-0'
local entries = redis.call('XRANGE', KEYS[1], '(' .. offset, '+', 'COUNT', ARGV[2])
if #entries > 0 then
  redis.call('HSET', KEYS[2], ARGV[1], entries[#entries][1])
end
return entries
