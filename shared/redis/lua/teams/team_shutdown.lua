-- team_shutdown: shut a teammate down at once (`teamctl team shutdown --force`): revoke its
-- turn (the lease goes, so the running turn's checkpoints and end are refused), give its team
-- tasks back to the board, set it shutdown and tell the lead.
-- KEYS[1] the mate hash, KEYS[2] its turn key, KEYS[3] bus stream, KEYS[4] bus sequence
-- counter, KEYS[5] the lead's inbox, KEYS[6] ready zset, KEYS[7] running set, KEYS[8] counts
-- hash, KEYS[9] token counter (unused), KEYS[10] events stream, KEYS[11..] the in-progress task
-- hashes.
-- ARGV[1] the notice's content, ARGV[2] the teammate's name.
-- Returns {verdict, released}: 'ok' (released: how many tasks went back to the board; the
-- caller wakes teammates for them), 'unknown' (no such teammate), 'shutdown' (already shut
-- down; nothing changes) or 'retry' (the running tasks changed since the caller read them: a
-- claim landed meanwhile; nothing changes, read again).
-- uses: core, team, events, messages
-- access: write
-- KEYS: mate_key, turn_key, bus_key, bus_seq_key, lead_inbox_key, ready_key, running_key,
--   counts_key, tokens_key, events_key, held_keys...
-- ARGV: notice, name
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'unknown', 0} end
if status == 'shutdown' then return {'shutdown', 0} end
if not snapshot_current(KEYS[7], 11, #KEYS) then return {'retry', 0} end
local now = now_ms()
redis.call('DEL', KEYS[2])
local held = team_held(11, #KEYS, ARGV[2])
for _, task_key in ipairs(held) do
  team_release(task_key, KEYS[6], KEYS[7], KEYS[8], KEYS[10], ARGV[2] .. ' was shut down (forced)',
    now)
end
redis.call('HSET', KEYS[1], 'status', 'shutdown', 'turn_token', '', 'idle_reason', '',
  'attempts', 0, 'last_seen_ms', now)
publish_message(KEYS[3], KEYS[4], 5, 5, 'system', 'lead', 'teammate.shutdown', '', ARGV[1], now)
mate_event(KEYS[10], ARGV[2], 'shutdown', 'forced')
return {'ok', #held}
