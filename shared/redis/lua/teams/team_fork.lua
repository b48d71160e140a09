-- team_fork: add a teammate whose memory is another's as it stood after one of its turns
-- (`teamctl team fork`), idle, with the other's grants. The caller copied that memory and the
-- turns' marks page by page into staging keys (the messages up to where the turn ended never
-- change, so the copy is whole however long it took); this script only renames them into place
-- and writes the record, so the fork appears whole or not at all.
-- KEYS[1] the fork's mate hash, KEYS[2] its memory list, KEYS[3] its turns stream, KEYS[4]
-- roster zset, KEYS[5] roster version, KEYS[6] the team's events stream, KEYS[7] the staged
-- memory, KEYS[8] the staged turn marks.
-- ARGV[1] name, ARGV[2] role, ARGV[3] prompt, ARGV[4] model, ARGV[5] api base ('' = none),
-- ARGV[6] queue, ARGV[7] max teammates, ARGV[8] plan state ('required' in plan mode, else ''),
-- ARGV[9] workspace tools (comma-separated), ARGV[10] the workspace directory ('' = the
-- worker's), ARGV[11] MCP entries (comma-separated), ARGV[12] fallback models
-- (comma-separated), ARGV[13] the memory's seq (messages committed since it began: where the
-- turn ended), ARGV[14] the turns it holds (the fork's next turn is one more), ARGV[15] its
-- characters and ARGV[16] the index of its last user message (its size record), ARGV[17]
-- forked_from (JSON: teammate, turn), ARGV[18] the event's detail.
-- Returns 'ok', 'exists' (a teammate has the name), 'full' (the roster holds max teammates) or
-- 'lost' (the staged memory expired before this ran); only 'ok' writes.
-- uses: core, events
-- access: write
-- KEYS: mate_key, memory_key, turns_key, roster_key, roster_version_key, events_key,
--   staged_memory_key, staged_turns_key
-- ARGV: name, role, prompt, model, api_base, queue, max_teammates, plan_state, workspace_tools,
--   workspace_dir, mcp, fallbacks, memory_seq, turns, memory_chars, memory_last_user,
--   forked_from, detail
local mate_key, memory_key, turns_key, roster_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local roster_version_key, events_key, staged_memory_key = KEYS[5], KEYS[6], KEYS[7]
local staged_turns_key = KEYS[8]
local name, role, prompt, model, api_base = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local queue, max_teammates, plan_state, workspace_tools = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local workspace_dir, mcp, fallbacks, memory_seq = ARGV[10], ARGV[11], ARGV[12], ARGV[13]
local turns, memory_chars, memory_last_user, forked_from = ARGV[14], ARGV[15], ARGV[16], ARGV[17]
local detail = ARGV[18]
if redis.call('EXISTS', mate_key) == 1 or redis.call('ZSCORE', roster_key, name) then
  return 'exists'
end
if redis.call('ZCARD', roster_key) >= tonumber(max_teammates) then return 'full' end
if redis.call('EXISTS', staged_memory_key) == 0 then return 'lost' end
local now = now_ms()
-- RENAME moves a key whatever its size in constant time, and drops the staging TTL with
-- PERSIST: team keys never expire.
redis.call('RENAME', staged_memory_key, memory_key)
redis.call('PERSIST', memory_key)
if redis.call('EXISTS', staged_turns_key) == 1 then
  redis.call('RENAME', staged_turns_key, turns_key)
  redis.call('PERSIST', turns_key)
else
  redis.call('DEL', turns_key)
end
local last = redis.call('ZRANGE', roster_key, -1, -1, 'WITHSCORES')
local position = 0
if #last > 0 then position = tonumber(last[2]) + 1 end
redis.call('ZADD', roster_key, position, name)
redis.call('INCR', roster_version_key)
redis.call('HSET', mate_key, 'name', name, 'role', role, 'prompt', prompt, 'model', model,
  'api_base', api_base, 'queue', queue, 'status', 'idle', 'turn_token', '', 'attempts', 0,
  'last_seen_ms', now, 'created_ms', now, 'idle_reason', '', 'last_error', '', 'worker', '',
  'shutdown_request', '', 'plan_state', plan_state, 'plan_request', '',
  'tools', workspace_tools, 'workspace', workspace_dir, 'mcp', mcp, 'fallbacks', fallbacks,
  'answered_model', '', 'fallback_from', '', 'epoch', 1, 'memory_seq', memory_seq,
  'turns', turns, 'memory_chars', memory_chars, 'memory_last_user', memory_last_user,
  'forked_from', forked_from)
mate_event(events_key, name, 'idle', detail)
return 'ok'
