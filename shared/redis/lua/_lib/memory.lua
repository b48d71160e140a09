-- memory: a member's chat memory (turn_checkpoint.lua, lead_checkpoint.lua), kept within its
-- caps as it grows.

-- A memory list holds chat messages as JSON. Beside it a size record (hash fields
-- <prefix>chars and <prefix>last_user) keeps the characters of all its JSON texts and the index
-- of its last user message, updated on every append and drop, so a checkpoint costs what it
-- appends and drops, never a walk of the whole memory.
local MEMORY_SCAN_BATCH = 16

-- Characters (code points) of a UTF-8 text: its bytes less its continuation bytes.
local function text_chars(text)
  local _, continuations = string.gsub(text, '[\128-\191]', '')
  return #text - continuations
end

local function is_user_message(raw)
  local ok, message = pcall(cjson.decode, raw)
  return ok and type(message) == 'table' and message.role == 'user'
end

-- The size record of `list_key`; without one (a memory written before it existed, or reset by a
-- re-spawn) it is counted once from the whole list.
local function memory_size(list_key, size_key, prefix)
  local f = redis.call('HMGET', size_key, prefix .. 'chars', prefix .. 'last_user')
  if f[1] and f[2] then return {chars = tonumber(f[1]), last_user = tonumber(f[2])} end
  local size = {chars = 0, last_user = -1}
  for i, raw in ipairs(redis.call('LRANGE', list_key, 0, -1)) do
    size.chars = size.chars + text_chars(raw)
    if is_user_message(raw) then size.last_user = i - 1 end
  end
  return size
end

-- Where to cut the memory so that at most `max_messages` and `max_chars` remain: before the
-- first user message that gets it there, so whole exchanges go and no assistant tool call is
-- separated from its results. The newest exchange is never cut, even when it alone is over a
-- cap (a bound to approach, not a cut mid-step). Reads only what it drops, and the message it
-- cuts before. Returns the index to keep from (0: nothing goes) and the characters dropped.
local function memory_cut(list_key, size, max_messages, max_chars)
  local length = redis.call('LLEN', list_key)
  if size.last_user <= 0 or (length <= max_messages and size.chars <= max_chars) then
    return 0, 0
  end
  local dropped_chars = 0
  local first = 0
  while true do
    local batch = redis.call('LRANGE', list_key, first,
      math.min(first + MEMORY_SCAN_BATCH - 1, size.last_user))
    for j, raw in ipairs(batch) do
      local i = first + j - 1
      if i == size.last_user or (i > 0 and is_user_message(raw)
          and length - i <= max_messages and size.chars - dropped_chars <= max_chars) then
        return i, dropped_chars
      end
      dropped_chars = dropped_chars + text_chars(raw)
    end
    first = first + #batch
  end
end

-- Append ARGV[first_arg..] to a memory list, then drop its oldest whole exchanges past
-- `max_messages` messages or `max_chars` characters; returns how many messages were dropped.
-- The size record's `seq` counts the messages ever appended since the memory began (a memory
-- older than the count starts it at its length), so a turn's first message keeps its number
-- while the caps drop older ones (shared/teams/transcripts.py).
local function remember(list_key, size_key, prefix, first_arg, max_messages, max_chars)
  local size = memory_size(list_key, size_key, prefix)
  local length = redis.call('LLEN', list_key)
  if not redis.call('HGET', size_key, prefix .. 'seq') then
    redis.call('HSET', size_key, prefix .. 'seq', length)
  end
  redis.call('HINCRBY', size_key, prefix .. 'seq', #ARGV - first_arg + 1)
  for i = first_arg, #ARGV do
    redis.call('RPUSH', list_key, ARGV[i])
    size.chars = size.chars + text_chars(ARGV[i])
    if is_user_message(ARGV[i]) then size.last_user = length + i - first_arg end
  end
  local cut, dropped_chars = memory_cut(list_key, size, max_messages, max_chars)
  if cut > 0 then
    redis.call('LTRIM', list_key, cut, -1)
    size.chars = size.chars - dropped_chars
    size.last_user = size.last_user - cut
  end
  redis.call('HSET', size_key, prefix .. 'chars', size.chars, prefix .. 'last_user',
    size.last_user)
  return cut
end
