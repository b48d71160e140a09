-- publish: append a message to the run's bus and fan it out to its recipients' inboxes, atomically.
-- KEYS[1] bus stream, KEYS[2] bus sequence counter, KEYS[3..] the recipients' inbox streams.
-- ARGV[1] from, ARGV[2] to ('' when unaddressed), ARGV[3] type, ARGV[4] task id ('' when none),
-- ARGV[5] content, ARGV[6] created_at ms.
-- Returns {message id (the bus entry id), bus length after the append}.
-- An inbox entry reuses the message's id and holds one field, seq (the message's position on the
-- bus), so offsets, trimming and history all speak bus ids and the content is stored once.
local id = redis.call('XADD', KEYS[1], '*',
  'from', ARGV[1], 'to', ARGV[2], 'type', ARGV[3], 'task_id', ARGV[4],
  'content', ARGV[5], 'created_at', ARGV[6])
local seq = redis.call('INCR', KEYS[2])
for i = 3, #KEYS do
  redis.call('XADD', KEYS[i], id, 'seq', seq)
end
-- After the run ended its keys expire (shared/retention.py); keys created by a late message must
-- not outlive the bus.
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  for i = 2, #KEYS do
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
return {id, redis.call('XLEN', KEYS[1])}
