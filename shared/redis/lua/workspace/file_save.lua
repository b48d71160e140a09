-- file_save: make one file of a workspace kept in Redis point at new content (or delete it) if the
-- writer saw the file's current version, within the workspace's caps, and while the writer's claim
-- or turn holds. Two writers that saw the same version cannot both save: the second is refused
-- (conflict) and keeps its copy to redo its change on the new version, so no write is lost silently.
-- A writer that saw no file (seen 0) may create it while the path holds no file, whatever its
-- deleted record says; one that saw a version must find that version. A path's first version is
-- one past `floor` (the highest version of a dropped deleted record), so no version is ever reused.
-- The content itself was SET beforehand, with a TTL, under a blob key of its own: this script only
-- moves pointers, so it costs the same for a 64 MiB file as for an empty one.
-- What the workspace keeps is counted in the info hash's `bytes`: per file its content, its path
-- twice (a field of `files` and of `file_versions`) and ARGV[11] bytes of Redis's own records; per
-- deleted path, its path twice (`file_versions` and `file_deletions`) and ARGV[11] bytes.
-- KEYS[1] files hash (path -> blob id), KEYS[2] versions hash (path -> version),
-- KEYS[3] info hash (bytes, rev, floor), KEYS[4] the writer's fence: a task hash ('task': its
-- token field, while in_progress) or a turn key ('turn': its value); KEYS[5] the new content's
-- blob key (a put; refused, it is deleted), KEYS[6] the blob key of the content the writer
-- replaces, KEYS[7] the deletions index (sorted set: deleted path -> when, ms).
-- ARGV[1] path, ARGV[2] the version the writer saw (0: it saw no file), ARGV[3] 'put' or
-- 'delete', ARGV[4] the new blob's id, ARGV[5] the replaced blob's id ('' when there is none),
-- ARGV[6] largest file (bytes), ARGV[7] largest workspace (bytes), ARGV[8] most files,
-- ARGV[9] fence kind ('task', 'turn' or 'none'), ARGV[10] fence token, ARGV[11] the bytes
-- counted per path besides the path itself, ARGV[12] how long a deleted path's record is kept (ms).
-- Returns {verdict, version, rev, old, deleted}: verdict 'saved' (the new version), 'conflict'
-- (the current version), 'file_too_big' / 'too_many_files' / 'workspace_full' (the current
-- version), 'expired' (the new content's key is gone: its TTL ran out before this call), 'stale'
-- (0: the fence is lost); rev is the workspace's after the call (a writer whose last known rev is
-- one less saw every save); old and deleted count the deleted records past their keep and in all,
-- for the caller to drop (file_prune.lua).
-- uses: core
-- access: write
-- KEYS: files_key, versions_key, info_key, fence_key, blob_key, old_blob_key, deletions_key
-- ARGV: path, seen, op, blob_id, old_blob_id, max_file_bytes, max_workspace_bytes, max_files,
--   fence, token, record_bytes, keep_ms
local files_key, versions_key, info_key, fence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local blob_key, old_blob_key, deletions_key = KEYS[5], KEYS[6], KEYS[7]
local path, seen, op, blob_id, old_blob_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local max_file_bytes, max_workspace_bytes, max_files, fence = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local token, record_bytes, keep_ms = ARGV[10], ARGV[11], ARGV[12]
local path, seen, op = path, tonumber(seen), op
local function answer(verdict, version, rev)
  local old = redis.call('ZCOUNT', deletions_key, '-inf', now_ms() - tonumber(keep_ms))
  return {verdict, version, rev, old, redis.call('ZCARD', deletions_key)}
end
local function refused(verdict, version, rev)
  if op == 'put' then redis.call('DEL', blob_key) end
  return answer(verdict, version, rev)
end
local fence, token = fence, token
if fence == 'task' then
  local current = redis.call('HMGET', fence_key, 'token', 'status')
  if current[1] ~= token or token == '0' or current[2] ~= 'in_progress' then
    return refused('stale', 0, 0)
  end
elseif fence == 'turn' then
  if redis.call('GET', fence_key) ~= token then return refused('stale', 0, 0) end
end
local recorded = redis.call('HGET', versions_key, path)
local version = tonumber(recorded or '0')
local info = redis.call('HMGET', info_key, 'rev', 'bytes', 'floor')
local rev, kept, floor = tonumber(info[1] or '0'), tonumber(info[2] or '0'), tonumber(info[3] or '0')
local current = redis.call('HGET', files_key, path) or ''
-- The blob the caller read beforehand must still be the file's; then what the writer saw.
if current ~= old_blob_id or (seen == 0 and current ~= '') or (seen ~= 0 and version ~= seen) then
  return refused('conflict', version, rev)
end
if op == 'delete' and current == '' then return answer('saved', version, rev) end  -- no file
if op == 'put' and redis.call('EXISTS', blob_key) == 0 then return answer('expired', version,
  rev) end
local path_bytes = 2 * #path + tonumber(record_bytes)
local old_cost = 0
if current ~= '' then
  old_cost = redis.call('STRLEN', old_blob_key) + path_bytes
elseif recorded and redis.call('ZSCORE', deletions_key, path) then
  old_cost = path_bytes
end
local new_bytes = 0
if op == 'put' then new_bytes = redis.call('STRLEN', blob_key) end
if new_bytes > tonumber(max_file_bytes) then return refused('file_too_big', version, rev) end
if current == '' and redis.call('HLEN', files_key) >= tonumber(max_files) then
  return refused('too_many_files', version, rev)
end
local new_cost = new_bytes + path_bytes  -- a put's file, or a delete's record
local total = math.max(kept - old_cost + new_cost, 0)
if new_cost > old_cost and total > tonumber(max_workspace_bytes) then
  return refused('workspace_full', version, rev)
end
local next_version = (recorded and version or floor) + 1
redis.call('HSET', versions_key, path, next_version)
if op == 'put' then
  redis.call('PERSIST', blob_key)
  inherit_ttl(blob_key, versions_key)
  redis.call('HSET', files_key, path, blob_id)
  redis.call('ZREM', deletions_key, path)
else
  redis.call('HDEL', files_key, path)
  redis.call('ZADD', deletions_key, now_ms(), path)
  inherit_ttl(deletions_key, versions_key)
end
if old_blob_id ~= '' then redis.call('DEL', old_blob_key) end
redis.call('HSET', info_key, 'bytes', total, 'rev', rev + 1)
return answer('saved', next_version, rev + 1)
