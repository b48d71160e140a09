-- team_shutdown: shut a teammate down at once (`teamctl team shutdown --force`): revoke its
-- turn (the lease goes, so the running turn's checkpoints and end are refused), set it
-- shutdown and tell the lead.
-- KEYS[1] the mate hash, KEYS[2] its turn key, KEYS[3] bus stream, KEYS[4] bus sequence
-- counter, KEYS[5] the lead's inbox.
-- ARGV[1] the notice's content.
-- Returns 'ok', 'unknown' (no such teammate) or 'shutdown' (already shut down; nothing changes).
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 'unknown' end
if status == 'shutdown' then return 'shutdown' end
local now = now_ms()
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'status', 'shutdown', 'turn_token', '', 'idle_reason', '',
  'attempts', 0, 'last_seen_ms', now)
publish_message(KEYS[3], KEYS[4], 5, 5, 'system', 'lead', 'teammate.shutdown', '', ARGV[1], now)
return 'ok'
