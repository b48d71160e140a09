-- file_save: make one file of a workspace kept in Redis point at new content (or delete it) if the
-- writer saw the file's current version, within the workspace's caps, and while the writer's claim
-- or turn holds. Two writers that saw the same version cannot both save: the second is refused
-- (conflict) and keeps its copy to redo its change on the new version, so no write is lost silently.
-- The content itself was SET beforehand, with a TTL, under a blob key of its own: this script only
-- moves pointers, so it costs the same for a 64 MiB file as for an empty one.
-- KEYS[1] files hash (path -> blob id), KEYS[2] versions hash (path -> version),
-- KEYS[3] info hash (bytes, rev), KEYS[4] the writer's fence: a task hash ('task': its token
-- field, while in_progress) or a turn key ('turn': its value); KEYS[5] the new content's blob key
-- (a put; refused, it is deleted), KEYS[6] the blob key of the content the writer replaces.
-- ARGV[1] path, ARGV[2] the version the writer saw (0: none), ARGV[3] 'put' or 'delete',
-- ARGV[4] the new blob's id, ARGV[5] the replaced blob's id ('' when there is none),
-- ARGV[6] largest file (bytes), ARGV[7] largest workspace (bytes), ARGV[8] fence kind ('task',
-- 'turn' or 'none'), ARGV[9] fence token.
-- Returns {verdict, version, rev}: 'saved' (the new version), 'conflict' (the current version),
-- 'file_too_big' / 'workspace_full' (the current version), 'expired' (the new content's key is
-- gone: its TTL ran out before this call), 'stale' (0: the fence is lost); rev is
-- the workspace's after the call (a writer whose last known rev is one less saw every save).
local path, seen, op = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local function refused(verdict, version, rev)
  if op == 'put' then redis.call('DEL', KEYS[5]) end
  return {verdict, version, rev}
end
local fence, token = ARGV[8], ARGV[9]
if fence == 'task' then
  local current = redis.call('HMGET', KEYS[4], 'token', 'status')
  if current[1] ~= token or token == '0' or current[2] ~= 'in_progress' then
    return refused('stale', 0, 0)
  end
elseif fence == 'turn' then
  if redis.call('GET', KEYS[4]) ~= token then return refused('stale', 0, 0) end
end
local version = tonumber(redis.call('HGET', KEYS[2], path) or '0')
local rev = tonumber(redis.call('HGET', KEYS[3], 'rev') or '0')
if version ~= seen or (redis.call('HGET', KEYS[1], path) or '') ~= ARGV[5] then
  return refused('conflict', version, rev)
end
if op == 'put' and redis.call('EXISTS', KEYS[5]) == 0 then return {'expired', version, rev} end
local old_bytes = 0
if ARGV[5] ~= '' then old_bytes = redis.call('STRLEN', KEYS[6]) end
local new_bytes = 0
if op == 'put' then new_bytes = redis.call('STRLEN', KEYS[5]) end
if new_bytes > tonumber(ARGV[6]) then return refused('file_too_big', version, rev) end
local total = tonumber(redis.call('HGET', KEYS[3], 'bytes') or '0') - old_bytes + new_bytes
if new_bytes > old_bytes and total > tonumber(ARGV[7]) then
  return refused('workspace_full', version, rev)
end
if op == 'put' then
  redis.call('PERSIST', KEYS[5])
  inherit_ttl(KEYS[5], KEYS[2])
  redis.call('HSET', KEYS[1], path, ARGV[4])
else
  redis.call('HDEL', KEYS[1], path)
end
if ARGV[5] ~= '' then redis.call('DEL', KEYS[6]) end
redis.call('HSET', KEYS[2], path, version + 1)
redis.call('HSET', KEYS[3], 'bytes', total, 'rev', rev + 1)
return {'saved', version + 1, rev + 1}
