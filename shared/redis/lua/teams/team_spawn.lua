-- team_spawn: (re)start a teammate with a role and prompt, unless it is working. A re-spawn
-- starts a new life (its epoch goes up) and expires the protocol requests of the last one still
-- pending, so no answer to them can reach the new life (request_resolve.lua checks the epoch).
-- KEYS[1] the mate hash, KEYS[2] its memory list, KEYS[3] roster zset, KEYS[4] roster version,
-- KEYS[5] the team's events stream, KEYS[6] its requests set (mate_requests), KEYS[7..] the
-- hashes of the requests that set held when the caller read it, in ARGV[14..]'s order.
-- ARGV[1] name, ARGV[2] role, ARGV[3] prompt, ARGV[4] model, ARGV[5] api base ('' = none),
-- ARGV[6] queue, ARGV[7] max teammates, ARGV[8] the first memory message (JSON: the prompt),
-- ARGV[9] plan state ('required' in plan mode, else ''), ARGV[10] workspace tools
-- (comma-separated, '' = none), ARGV[11] the team's workspace directory ('' = the worker's),
-- ARGV[12] MCP entries (comma-separated, '' = none), ARGV[13] fallback models (comma-separated,
-- '' = none), ARGV[14..] the request ids of KEYS[7..].
-- Returns 'ok' (the caller enqueues the first turn), 'working' (refused: a turn may be running),
-- 'full' (the roster holds max teammates already) or 'retry' (the requests set changed since
-- the caller read it: read it again); only 'ok' writes. The unread inbox is kept: a re-spawned
-- teammate still gets the mail sent to it while it was idle or shut down. A re-spawned fork is a
-- fork no more: its memory starts again from the prompt.
-- uses: core, events
-- access: write
-- KEYS: mate_key, memory_key, roster_key, roster_version_key, events_key, mate_requests_key,
--   request_keys...
-- ARGV: name, role, prompt, model, api_base, queue, max_teammates, first_message, plan_state,
--   workspace_tools, workspace_dir, mcp, fallbacks, request_ids...
local mate_key, memory_key, roster_key, roster_version_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local events_key, mate_requests_key = KEYS[5], KEYS[6]
local request_keys_from = 7  -- KEYS[request_keys_from..]
local name, role, prompt, model, api_base = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local queue, max_teammates, first_message, plan_state = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local workspace_tools, workspace_dir, mcp, fallbacks = ARGV[10], ARGV[11], ARGV[12], ARGV[13]
local request_ids_from = 14  -- ARGV[request_ids_from..]
if redis.call('HGET', mate_key, 'status') == 'working' then return 'working' end
if redis.call('SCARD', mate_requests_key) ~= #ARGV - request_ids_from + 1 then return 'retry' end
for i = request_ids_from, #ARGV do
  if redis.call('SISMEMBER', mate_requests_key, ARGV[i]) == 0 then return 'retry' end
end
local now = now_ms()
if not redis.call('ZSCORE', roster_key, name) then
  if redis.call('ZCARD', roster_key) >= tonumber(max_teammates) then return 'full' end
  local last = redis.call('ZRANGE', roster_key, -1, -1, 'WITHSCORES')
  local position = 0
  if #last > 0 then position = tonumber(last[2]) + 1 end
  redis.call('ZADD', roster_key, position, name)
  redis.call('INCR', roster_version_key)
  redis.call('HSET', mate_key, 'created_ms', now)
end
for i = request_keys_from, #KEYS do
  if redis.call('HGET', KEYS[i], 'status') == 'pending' then
    redis.call('HSET', KEYS[i], 'status', 'expired', 'resolved_ms', now, 'resolved_by', 'system')
    request_event(events_key, ARGV[i + 7], 'expired',
      redis.call('HGET', KEYS[i], 'kind') .. ' ' .. name .. ' re-spawned')
  end
end
redis.call('DEL', mate_requests_key)
redis.call('DEL', memory_key)
redis.call('RPUSH', memory_key, first_message)
-- The new memory's size record is counted afresh by its first checkpoint (turn_checkpoint.lua);
-- its message count and its turns start again with it (the prompt is its first message).
redis.call('HDEL', mate_key, 'memory_chars', 'memory_last_user')
redis.call('HSET', mate_key, 'memory_seq', 1, 'turns', 0)
redis.call('HINCRBY', mate_key, 'epoch', 1)
redis.call('HSET', mate_key, 'name', name, 'role', role, 'prompt', prompt,
  'model', model, 'api_base', api_base, 'queue', queue, 'status', 'working',
  'turn_token', '', 'attempts', 0, 'last_seen_ms', now, 'idle_reason', '', 'last_error', '',
  'worker', '', 'shutdown_request', '', 'plan_state', plan_state, 'plan_request', '',
  'tools', workspace_tools, 'workspace', workspace_dir, 'mcp', mcp, 'fallbacks', fallbacks,
  'answered_model', '', 'fallback_from', '', 'forked_from', '')
mate_event(events_key, name, 'working', 'spawned')
return 'ok'
