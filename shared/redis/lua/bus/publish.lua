-- publish: append a message to the run's bus and fan it out to its recipients' inboxes, atomically.
-- KEYS[1] bus stream, KEYS[2] bus sequence counter, KEYS[3] roster version counter,
-- KEYS[4..] the recipients' inbox streams, chosen by the roster of version ARGV[6].
-- ARGV[1] from, ARGV[2] to ('' when unaddressed), ARGV[3] type, ARGV[4] task id ('' when none),
-- ARGV[5] content, ARGV[6] the roster version the caller chose the recipients by, ARGV[7] the
-- sender's span as a W3C traceparent ('' when not traced; stored only when given).
-- Returns {message id (the bus entry id), bus length after the append, created_at ms}, or
-- {'', 0, 0} without publishing when the roster has changed since (the caller reads it again).
-- An inbox entry reuses the message's id and holds one field, seq (the message's position on the
-- bus), so offsets, trimming and history all speak bus ids and the content is stored once.
-- uses: core, messages
-- access: write
-- KEYS: bus_key, bus_seq_key, roster_version_key, inbox_keys...
-- ARGV: sender, addressee, mtype, task_id, content, roster_version, traceparent?
local bus_key, bus_seq_key, roster_version_key = KEYS[1], KEYS[2], KEYS[3]
local inbox_keys_from = 4  -- KEYS[inbox_keys_from..]
local sender, addressee, mtype, task_id, content = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local roster_version, traceparent = ARGV[6], ARGV[7]
if tonumber(redis.call('GET', roster_version_key) or '0') ~= tonumber(roster_version) then
  return {'', 0, 0}
end
local now = now_ms()
local extra = {}
if traceparent and traceparent ~= '' then extra = {'traceparent', traceparent} end
local id = publish_message(bus_key, bus_seq_key, keys_from(inbox_keys_from),
  sender, addressee, mtype, task_id, content, now, extra)
return {id, redis.call('XLEN', bus_key), now}
