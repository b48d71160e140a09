-- turn_handover: a job that ran turns for long hands the teammate, still working, to a fresh job
-- (RQ's job timeout bounds a job, not a turn): the lease goes, the teammate is seen now, and
-- the caller enqueues the next turn, which reconcile leaves alone while it waits in its queue.
-- KEYS[1] the turn key, KEYS[2] the mate hash, KEYS[3] the team's events stream.
-- ARGV[1] token, ARGV[2] teammate name.
-- Returns 'ok' when handed over, 'stale' when the token no longer holds the turn (nothing
-- changes).
-- uses: core, events
-- access: write
-- KEYS: turn_key, mate_key, events_key
-- ARGV: token, name
local turn_key, mate_key, events_key = KEYS[1], KEYS[2], KEYS[3]
local token, name = ARGV[1], ARGV[2]
if redis.call('GET', turn_key) ~= token then return 'stale' end
redis.call('DEL', turn_key)
redis.call('HSET', mate_key, 'turn_token', '', 'last_seen_ms', now_ms())
mate_event(events_key, name, 'working', 'handed over')
return 'ok'
