-- turn_mark: record that a turn of a teammate or of the lead begins or ends, on its turns
-- stream, fenced as its checkpoints are: a begin keeps where in its memory the turn's messages
-- start, so the memory reads turn by turn (`teamctl team transcript`).
-- KEYS[1] the fence (a teammate's turn key, or the lead lease), KEYS[2] its memory list, KEYS[3]
-- the hash holding the memory's size record (the mate hash, or the lead's memory_size hash),
-- KEYS[4] its turns stream.
-- ARGV[1] the turn's token (the lease owner for the lead), ARGV[2] the size record's field
-- prefix ('memory_' in a mate hash, '' in the lead's), ARGV[3] 'begin' or 'end', ARGV[4] the
-- detail: the worker or process that runs the turn (begin), how the turn ended (end), ARGV[5]
-- the stream's length cap (entries, approximate).
-- Each entry: kind, turn (its number since the memory began), epoch (the memory's: a re-spawn
-- or `--new` begins another), at (the messages committed since the memory began; a memory older
-- than that count has its length), detail.
-- Returns the turn's number, -1 when the token no longer holds the fence (nothing written).
-- access: write
-- KEYS: fence_key, memory_key, size_key, turns_key
-- ARGV: token, prefix, kind, detail, max_entries
local fence_key, memory_key, size_key, turns_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, prefix, kind, detail, max_entries = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('GET', fence_key) ~= token then return -1 end
local turn
if kind == 'begin' then
  turn = redis.call('HINCRBY', size_key, 'turns', 1)
else
  turn = tonumber(redis.call('HGET', size_key, 'turns') or '0')
end
local f = redis.call('HMGET', size_key, prefix .. 'seq', 'epoch')
local at = f[1]
if not at then at = redis.call('LLEN', memory_key) end
redis.call('XADD', turns_key, 'MAXLEN', '~', max_entries, '*', 'kind', kind, 'turn', turn,
  'epoch', f[2] or '0', 'at', at, 'detail', detail)
return turn
