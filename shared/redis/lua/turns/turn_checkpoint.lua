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

if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local dropped = remember(KEYS[2], KEYS[4], 'memory_', 6, tonumber(ARGV[4]), tonumber(ARGV[5]))
if ARGV[3] ~= '' then redis.call('HSET', KEYS[3], ARGV[2], ARGV[3]) end
redis.call('DEL', KEYS[5])
redis.call('HSET', KEYS[4], 'last_seen_ms', now_ms())
return dropped
