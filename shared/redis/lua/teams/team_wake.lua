-- team_wake: after mail was published to a teammate, flip it from idle to working.
-- KEYS[1] the mate hash, KEYS[2] the team's events stream.
-- ARGV[1] the teammate's name.
-- Returns its queue when it was idle (the caller enqueues one turn there), else 0: a working teammate's turn
-- sees the mail before it ends (turn_end checks the inbox in the same serialized step), and a
-- shut-down one keeps the mail unread and wakes for nothing.
-- uses: core, events
-- access: write
-- KEYS: mate_key, events_key
-- ARGV: name
local mate_key, events_key = KEYS[1], KEYS[2]
local name = ARGV[1]
if redis.call('HGET', mate_key, 'status') ~= 'idle' then return 0 end
redis.call('HSET', mate_key, 'status', 'working', 'idle_reason', '', 'attempts', 0,
  'last_seen_ms', now_ms())
mate_event(events_key, name, 'working', 'woken')
return redis.call('HGET', mate_key, 'queue')
