-- _guarded: the wrapper that makes any script a turn's exactly-once write (scripts.py puts the
-- script's body where the BODY line is). A teammate's tool call runs its writes through it, so a
-- turn rerun after a crash replays the first outcome instead of writing again.
-- KEYS[#KEYS - 1] the teammate's turn key, KEYS[#KEYS] its effects hash (call key -> outcome),
-- both removed before the body runs; the body's own KEYS come first, unchanged.
-- ARGV[#ARGV - 1] the turn's token, ARGV[#ARGV] the call key (tool call and script call within
-- it), both removed likewise.
-- Returns the body's result, or the recorded one for a call key already run; an error reply
-- 'TURN_REVOKED' (nothing written) when the token no longer holds the turn.
-- A body's result must survive cjson: strings, integers below 1e14 (ms timestamps are), and
-- arrays without nil holes, as every script's reply is. A replay matches by the call key only
-- (the n-th call of the script within one tool call), so the caller must make the same calls
-- in the same order given the same outcomes; a read whose answer may differ belongs in READS
-- (scripts.py), which runs unguarded.
local guard_turn, guard_effects = KEYS[#KEYS - 1], KEYS[#KEYS]
local guard_token, guard_call = ARGV[#ARGV - 1], ARGV[#ARGV]
table.remove(KEYS); table.remove(KEYS); table.remove(ARGV); table.remove(ARGV)
if redis.call('GET', guard_turn) ~= guard_token then
  return redis.error_reply('TURN_REVOKED the turn lease no longer holds this token')
end
-- A nil result is recorded too, so a replay takes the same path through the caller's code.
local NIL = '__nil'
local recorded = redis.call('HGET', guard_effects, guard_call)
if recorded then
  if recorded == NIL then return nil end
  return cjson.decode(recorded)
end
local result = (function()
--BODY--
end)()
if result == nil or result == false then
  redis.call('HSET', guard_effects, guard_call, NIL)
else
  redis.call('HSET', guard_effects, guard_call, cjson.encode(result))
end
return result
