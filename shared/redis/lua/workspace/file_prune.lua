-- file_prune: drop the records of up to ARGV[2] deleted paths of a workspace kept in Redis, the
-- longest deleted first, among those deleted at least ARGV[1] ms ago (0: any). It walks the
-- deletions index from its oldest end and stops after the batch, never the whole hash. A dropped
-- path's version raises `floor`, past which every new path starts (file_save.lua), so a writer
-- that saw the old file is still refused; its bytes leave the workspace's count.
-- KEYS[1] files hash (path -> blob id), KEYS[2] versions hash (path -> version),
-- KEYS[3] info hash (bytes, floor), KEYS[4] the deletions index (sorted set: path -> when, ms).
-- ARGV[1] how long a deleted path's record is kept (ms), ARGV[2] most records dropped,
-- ARGV[3] the bytes counted per path besides the path itself (file_save.lua's ARGV[11]).
-- Returns {dropped, left}: records dropped, and records past their keep still in the index.
-- uses: core
-- access: write
-- KEYS: files_key, versions_key, info_key, deletions_key
-- ARGV: keep_ms, max_dropped, record_bytes
local files_key, versions_key, info_key, deletions_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local keep_ms, max_dropped, record_bytes = ARGV[1], ARGV[2], ARGV[3]
local cutoff = now_ms() - tonumber(keep_ms)
local paths = redis.call('ZRANGEBYSCORE', deletions_key, '-inf', cutoff, 'LIMIT', 0,
  tonumber(max_dropped))
if #paths == 0 then return {0, 0} end
local info = redis.call('HMGET', info_key, 'bytes', 'floor')
local kept, floor = tonumber(info[1] or '0'), tonumber(info[2] or '0')
local record = tonumber(record_bytes)
for _, path in ipairs(paths) do
  -- A put takes its path out of the index; a path that holds a file is not deleted anyway.
  if redis.call('HEXISTS', files_key, path) == 0 then
    floor = math.max(floor, tonumber(redis.call('HGET', versions_key, path) or '0'))
    redis.call('HDEL', versions_key, path)
    kept = kept - (2 * #path + record)
  end
  redis.call('ZREM', deletions_key, path)
end
redis.call('HSET', info_key, 'bytes', math.max(kept, 0), 'floor', floor)
return {#paths, redis.call('ZCOUNT', deletions_key, '-inf', cutoff)}
