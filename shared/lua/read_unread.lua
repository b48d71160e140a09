-- read_unread: return a member's messages after its read offset and advance the offset in the
-- same step, so concurrent readers of one member never get the same message twice or skip one.
-- KEYS[1] the member's inbox stream, KEYS[2] read offsets hash, KEYS[3] bus stream.
-- ARGV[1] member id, ARGV[2] max messages to take.
-- Returns {number of inbox entries consumed, bus entries as XRANGE returns them}; a consumed entry
-- whose message is gone from the bus (deleted by hand) is skipped.
local offset = redis.call('HGET', KEYS[2], ARGV[1])
local refs = redis.call('XRANGE', KEYS[1], '(' .. (offset or '0-0'), '+', 'COUNT', ARGV[2])
if #refs == 0 then
  return {0, {}}
end
redis.call('HSET', KEYS[2], ARGV[1], refs[#refs][1])
if not offset then
  -- A first read after the run ended creates the hash: give it the bus's expiry.
  local ttl = redis.call('PTTL', KEYS[3])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
end
local messages = {}
for _, ref in ipairs(refs) do
  local entry = redis.call('XRANGE', KEYS[3], ref[1], ref[1])
  if #entry > 0 then
    messages[#messages + 1] = entry[1]
  end
end
return {#refs, messages}
