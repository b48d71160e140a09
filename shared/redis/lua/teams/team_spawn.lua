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
-- teammate still gets the mail sent to it while it was idle or shut down.
-- uses: core, events
-- access: write
-- KEYS: mate_key, memory_key, roster_key, roster_version_key, events_key, mate_requests_key,
--   request_keys...
-- ARGV: name, role, prompt, model, api_base, queue, max_teammates, first_message, plan_state,
--   workspace_tools, workspace_dir, mcp, fallbacks, request_ids...
if redis.call('HGET', KEYS[1], 'status') == 'working' then return 'working' end
if redis.call('SCARD', KEYS[6]) ~= #ARGV - 13 then return 'retry' end
for i = 14, #ARGV do
  if redis.call('SISMEMBER', KEYS[6], ARGV[i]) == 0 then return 'retry' end
end
local now = now_ms()
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[7]) then return 'full' end
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  local position = 0
  if #last > 0 then position = tonumber(last[2]) + 1 end
  redis.call('ZADD', KEYS[3], position, ARGV[1])
  redis.call('INCR', KEYS[4])
  redis.call('HSET', KEYS[1], 'created_ms', now)
end
for i = 7, #KEYS do
  if redis.call('HGET', KEYS[i], 'status') == 'pending' then
    redis.call('HSET', KEYS[i], 'status', 'expired', 'resolved_ms', now, 'resolved_by', 'system')
    request_event(KEYS[5], ARGV[i + 7], 'expired',
      redis.call('HGET', KEYS[i], 'kind') .. ' ' .. ARGV[1] .. ' re-spawned')
  end
end
redis.call('DEL', KEYS[6])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], ARGV[8])
-- The new memory's size record is counted afresh by its first checkpoint (turn_checkpoint.lua);
-- its message count and its turns start again with it (the prompt is its first message).
redis.call('HDEL', KEYS[1], 'memory_chars', 'memory_last_user')
redis.call('HSET', KEYS[1], 'memory_seq', 1, 'turns', 0)
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'role', ARGV[2], 'prompt', ARGV[3],
  'model', ARGV[4], 'api_base', ARGV[5], 'queue', ARGV[6], 'status', 'working',
  'turn_token', '', 'attempts', 0, 'last_seen_ms', now, 'idle_reason', '', 'last_error', '',
  'worker', '', 'shutdown_request', '', 'plan_state', ARGV[9], 'plan_request', '',
  'tools', ARGV[10], 'workspace', ARGV[11], 'mcp', ARGV[12], 'fallbacks', ARGV[13],
  'answered_model', '', 'fallback_from', '')
mate_event(KEYS[5], ARGV[1], 'working', 'spawned')
return 'ok'
