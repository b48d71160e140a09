-- team_peek: a member's unread messages, without reading them (the offset does not move; a
-- teammate's turn advances it in its checkpoint, once the model has the messages).
-- KEYS[1] the member's inbox stream, KEYS[2] read offsets hash, KEYS[3] bus stream, KEYS[4]
-- (optional, the lead's peeks for its model) the lead inbox record, whose `seen` is raised to
-- the last id peeked: lead_inbox_fold.lua never folds what a model was shown.
-- ARGV[1] member id, ARGV[2] max messages (a page: callers page long inboxes, so no call copies
-- a thousand bodies), ARGV[3] (optional) the last inbox id an earlier page covered: this page
-- starts after it (or after the offset, if the member has read further since).
-- Returns {last inbox id peeked ('' = none), bus entries as XRANGE returns them}; a message gone
-- from the bus is skipped, but its id still counts as peeked.
-- uses: streams
-- access: read
-- KEYS: inbox_key, offsets_key, bus_key, lead_record_key?
-- ARGV: member, max_messages, after_id?
local inbox_key, offsets_key, bus_key, lead_record_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member, max_messages, after_id = ARGV[1], ARGV[2], ARGV[3]
local offset = redis.call('HGET', offsets_key, member) or '0-0'
if after_id and after_id ~= '' then offset = stream_id_max(offset, after_id) end
local refs = redis.call('XRANGE', inbox_key, '(' .. offset, '+', 'COUNT', max_messages)
local messages = {}
for _, ref in ipairs(refs) do
  local entry = redis.call('XRANGE', bus_key, ref[1], ref[1])
  if #entry > 0 then messages[#messages + 1] = entry[1] end
end
local last = ''
if #refs > 0 then
  last = refs[#refs][1]
  if lead_record_key then
    local seen = redis.call('HGET', lead_record_key, 'seen') or '0-0'
    redis.call('HSET', lead_record_key, 'seen', stream_id_max(seen, last))
  end
end
return {last, messages}
