-- lead_checkpoint: commit one step of the lead agent: its messages into the lead's memory and
-- the lead's inbox offset past the mail injected into that step, together, fenced by the lead
-- lease, so a lead killed mid-step and restarted sees that mail again, and only mail it never
-- committed. With ARGV[2] = '1' the memory is cleared first (`teamctl lead --new`); the offset
-- is kept, so mail already handled is not replayed into the new conversation. Past the memory
-- caps (messages, characters) the oldest whole exchanges go, as in turn_checkpoint.lua.
-- KEYS[1] the lead lease, KEYS[2] the lead's memory list, KEYS[3] the read offsets hash, KEYS[4]
-- the memory's size record (hash: chars, last_user, seq, turns, epoch).
-- ARGV[1] the lease owner, ARGV[2] '1' to clear the memory first, ARGV[3] inbox id to advance
-- to ('' = none injected), ARGV[4] memory cap (messages), ARGV[5] memory cap (characters of the
-- messages' JSON), ARGV[6..] the step's chat messages (JSON), in order.
-- Returns how many of memory's oldest messages the caps dropped (0 or more) when committed, -1
-- when the owner no longer holds the lease (nothing changes).
-- uses: memory
-- access: write
-- KEYS: lease_key, memory_key, offsets_key, size_key
-- ARGV: owner, clear, inbox_id, max_messages, max_chars, messages...
local lease_key, memory_key, offsets_key, size_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, clear, inbox_id, max_messages, max_chars = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local messages_from = 6  -- ARGV[messages_from..]
if redis.call('GET', lease_key) ~= owner then return -1 end
if clear == '1' then
  redis.call('DEL', memory_key)
  -- A new conversation: its turns count from 1 again, in a new epoch (transcripts.py).
  redis.call('HSET', size_key, 'chars', 0, 'last_user', -1, 'seq', 0, 'turns', 0)
  redis.call('HINCRBY', size_key, 'epoch', 1)
end
local dropped = remember(memory_key, size_key, '', messages_from, tonumber(max_messages),
  tonumber(max_chars))
if inbox_id ~= '' then redis.call('HSET', offsets_key, 'lead', inbox_id) end
return dropped
