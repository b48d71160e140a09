-- file_save: save (or delete) one file of a workspace kept in Redis, only if the writer saw the
-- file's current version, within the workspace's caps, and while the writer's claim or turn holds.
-- Two writers that saw the same version cannot both save: the second is refused (conflict) and
-- keeps its copy to redo its change on the new version, so no write is silently lost.
-- KEYS[1] files hash (path -> content), KEYS[2] versions hash (path -> version),
-- KEYS[3] info hash (bytes, rev), KEYS[4] the writer's fence: a task hash ('task': its token
-- field, while in_progress) or a turn key ('turn': its value); unread for 'none'.
-- ARGV[1] path, ARGV[2] the version the writer saw (0: none), ARGV[3] 'put' or 'delete',
-- ARGV[4] content (put), ARGV[5] largest file (bytes), ARGV[6] largest workspace (bytes),
-- ARGV[7] fence kind ('task', 'turn' or 'none'), ARGV[8] fence token.
-- Returns {verdict, version}: 'saved' (the new version), 'conflict' (the current version),
-- 'file_too_big' / 'workspace_full' (the current version), 'stale' (0: the fence is lost).
local path, seen, op, content = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local fence, token = ARGV[7], ARGV[8]
if fence == 'task' then
  local current = redis.call('HMGET', KEYS[4], 'token', 'status')
  if current[1] ~= token or token == '0' or current[2] ~= 'in_progress' then
    return {'stale', 0}
  end
elseif fence == 'turn' then
  if redis.call('GET', KEYS[4]) ~= token then return {'stale', 0} end
end
local version = tonumber(redis.call('HGET', KEYS[2], path) or '0')
if version ~= seen then return {'conflict', version} end
local old_bytes = redis.call('HSTRLEN', KEYS[1], path)
local new_bytes = 0
if op == 'put' then new_bytes = #content end
if new_bytes > tonumber(ARGV[5]) then return {'file_too_big', version} end
local total = tonumber(redis.call('HGET', KEYS[3], 'bytes') or '0') - old_bytes + new_bytes
if new_bytes > old_bytes and total > tonumber(ARGV[6]) then
  return {'workspace_full', version}
end
if op == 'put' then
  redis.call('HSET', KEYS[1], path, content)
else
  redis.call('HDEL', KEYS[1], path)
end
redis.call('HSET', KEYS[2], path, version + 1)
redis.call('HSET', KEYS[3], 'bytes', total)
redis.call('HINCRBY', KEYS[3], 'rev', 1)
return {'saved', version + 1}
