-- history: the last messages delivered to a member, read or not, oldest first (dispatch input).
-- KEYS[1] the member's inbox stream, KEYS[2] bus stream.
-- ARGV[1] how many (0 or less: all).
-- Returns bus entries as XRANGE returns them; messages trimmed from the bus are left out.
-- access: read
-- KEYS: inbox_key, bus_key
-- ARGV: count
local inbox_key, bus_key = KEYS[1], KEYS[2]
local count = ARGV[1]
local limit = tonumber(count)
local refs
if limit > 0 then
  refs = redis.call('XREVRANGE', inbox_key, '+', '-', 'COUNT', limit)
else
  refs = redis.call('XREVRANGE', inbox_key, '+', '-')
end
local messages = {}
for i = #refs, 1, -1 do
  local entry = redis.call('XRANGE', bus_key, refs[i][1], refs[i][1])
  if #entry > 0 then
    messages[#messages + 1] = entry[1]
  end
end
return messages
