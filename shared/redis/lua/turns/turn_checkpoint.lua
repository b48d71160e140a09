-- turn_checkpoint: commit one step of a turn: its messages into memory and the inbox offset
-- past the mail it injected, together, so a rerun neither loses nor repeats a message. Past the
-- memory caps (messages, characters) the oldest whole exchanges go: memory then starts at a user
-- message (an inbox block or the spawn prompt), so no assistant tool call is ever separated from
-- its results; the newest exchange stays whole even when it alone is over a cap.
-- KEYS[1] the turn key, KEYS[2] the memory list, KEYS[3] the read offsets hash, KEYS[4] the mate
-- hash (its memory_chars and memory_last_user fields are the memory's size record), KEYS[5] its
-- effects hash (the recorded writes of the step's tool calls: once their results are in memory,
-- or before any ran, they are no longer needed).
-- ARGV[1] token, ARGV[2] teammate name, ARGV[3] inbox id to advance to ('' = none injected),
-- ARGV[4] memory cap (messages), ARGV[5] memory cap (characters of the messages' JSON),
-- ARGV[6..] the step's chat messages (JSON), in order.
-- Returns how many of memory's oldest messages the caps dropped (0 or more) when committed, -1
-- when the token no longer holds the turn (nothing changes).
-- uses: core, memory
-- access: write
-- KEYS: turn_key, memory_key, offsets_key, mate_key, effects_key
-- ARGV: token, name, inbox_id, max_messages, max_chars, messages...
local turn_key, memory_key, offsets_key, mate_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local effects_key = KEYS[5]
local token, name, inbox_id, max_messages, max_chars = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local messages_from = 6  -- ARGV[messages_from..]

if redis.call('GET', turn_key) ~= token then return -1 end
local dropped = remember(memory_key, mate_key, 'memory_', messages_from, tonumber(max_messages),
  tonumber(max_chars))
if inbox_id ~= '' then redis.call('HSET', offsets_key, name, inbox_id) end
redis.call('DEL', effects_key)
redis.call('HSET', mate_key, 'last_seen_ms', now_ms())
return dropped
