-- publish: append a message to the run's bus and fan it out to its recipients' inboxes, atomically.
-- KEYS[1] bus stream, KEYS[2] bus sequence counter, KEYS[3..] the recipients' inbox streams.
-- ARGV[1] from, ARGV[2] to ('' when unaddressed), ARGV[3] type, ARGV[4] task id ('' when none),
-- ARGV[5] content.
-- Returns {message id (the bus entry id), bus length after the append, created_at ms}.
-- An inbox entry reuses the message's id and holds one field, seq (the message's position on the
-- bus), so offsets, trimming and history all speak bus ids and the content is stored once.
local now = now_ms()
local id = publish_message(KEYS[1], KEYS[2], 3, #KEYS,
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], now)
return {id, redis.call('XLEN', KEYS[1]), now}
