-- turn_end: end a turn, or tell it to go on when mail arrived during it; a teammate that
-- approved its shutdown (request_resolve.lua marked `shutdown_request`) ends shut down instead.
-- KEYS[1] the turn key, KEYS[2] the mate hash, KEYS[3] its inbox, KEYS[4] read offsets hash,
-- KEYS[5] bus stream, KEYS[6] bus sequence counter, KEYS[7] the lead's inbox.
-- ARGV[1] token, ARGV[2] teammate name, ARGV[3] idle reason ('done', 'step_limit',
-- 'error: ...'), ARGV[4] notice content, ARGV[5] '1' to end even with unread mail (a failed
-- turn: the mail waits for the next wake), ARGV[6] last error ('' = none).
-- Returns 'continue' (unread mail: run another turn in the same job), 'idle' (ended; one
-- teammate.idle notice to lead), 'shutdown' (ended shut down; one teammate.shutdown notice; its
-- unread mail waits) or 'stale' (the token no longer holds the turn: nothing changes).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 'stale' end
local approved = redis.call('HGET', KEYS[2], 'shutdown_request') or ''
if ARGV[5] ~= '1' and approved == '' then
  local offset = redis.call('HGET', KEYS[4], ARGV[2]) or '0-0'
  if #redis.call('XRANGE', KEYS[3], '(' .. offset, '+', 'COUNT', 1) > 0 then
    return 'continue'
  end
end
local now = now_ms()
redis.call('DEL', KEYS[1])
if approved ~= '' then
  redis.call('HSET', KEYS[2], 'status', 'shutdown', 'idle_reason', '', 'turn_token', '',
    'attempts', 0, 'last_seen_ms', now, 'last_error', ARGV[6])
  publish_message(KEYS[5], KEYS[6], 7, 7, 'system', 'lead', 'teammate.shutdown', '',
    ARGV[2] .. ' shut down (request ' .. approved .. ' approved)', now)
  return 'shutdown'
end
redis.call('HSET', KEYS[2], 'status', 'idle', 'idle_reason', ARGV[3], 'turn_token', '',
  'attempts', 0, 'last_seen_ms', now, 'last_error', ARGV[6])
publish_message(KEYS[5], KEYS[6], 7, 7, 'system', 'lead', 'teammate.idle', '', ARGV[4], now)
return 'idle'
