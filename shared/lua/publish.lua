-- publish: append a message to the run's bus and fan it out to each recipient's inbox, atomically.
-- KEYS[1] bus stream, KEYS[2..] the inbox streams of the recipients.
-- ARGV[1] from, ARGV[2] to, ARGV[3] type, ARGV[4] task id, ARGV[5] content, ARGV[6] created_at ms,
-- ARGV[7] approximate MAXLEN for the bus stream.
-- Returns the bus entry id, which is also the message id.
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[7], '*',
  'from', ARGV[1], 'to', ARGV[2], 'type', ARGV[3], 'task_id', ARGV[4],
  'content', ARGV[5], 'created_at', ARGV[6])
for i = 2, #KEYS do
  redis.call('XADD', KEYS[i], '*', 'ref', id,
    'from', ARGV[1], 'to', ARGV[2], 'type', ARGV[3], 'task_id', ARGV[4],
    'content', ARGV[5], 'created_at', ARGV[6])
end
return id
