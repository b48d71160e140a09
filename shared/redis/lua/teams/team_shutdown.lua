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
local mate_key, turn_key, bus_key, bus_seq_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lead_inbox_key, ready_key, running_key, counts_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local tokens_key, events_key = KEYS[9], KEYS[10]
local held_keys_from = 11  -- KEYS[held_keys_from..]
local notice, name = ARGV[1], ARGV[2]
local status = redis.call('HGET', mate_key, 'status')
if not status then return {'unknown', 0} end
if status == 'shutdown' then return {'shutdown', 0} end
if not snapshot_current(running_key, held_keys_from, #KEYS) then return {'retry', 0} end
local now = now_ms()
redis.call('DEL', turn_key)
local held = team_held(held_keys_from, #KEYS, name)
for _, task_key in ipairs(held) do
  team_release(task_key, ready_key, running_key, counts_key, events_key,
    name .. ' was shut down (forced)',
    now)
end
redis.call('HSET', mate_key, 'status', 'shutdown', 'turn_token', '', 'idle_reason', '',
  'attempts', 0, 'last_seen_ms', now)
publish_message(bus_key, bus_seq_key, {lead_inbox_key}, 'system', 'lead', 'teammate.shutdown', '',
  notice, now)
mate_event(events_key, name, 'shutdown', 'forced')
return {'ok', #held}
