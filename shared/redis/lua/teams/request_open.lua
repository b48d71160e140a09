-- request_open: open a protocol request to a teammate: the record, its index entry, the
-- envelope in the teammate's inbox and its wake-up, in one step. The record carries the
-- addressee's spawn epoch, and its id joins the addressee's requests set, so a re-spawn expires it.
-- KEYS[1] the request hash, KEYS[2] requests zset, KEYS[3] bus stream, KEYS[4] bus sequence
-- counter, KEYS[5] the addressee's inbox, KEYS[6] the addressee's mate hash, KEYS[7] the team's
-- events stream, KEYS[8] the addressee's requests set (mate_requests).
-- ARGV[1] request id, ARGV[2] kind, ARGV[3] from, ARGV[4] to, ARGV[5] payload (text),
-- ARGV[6] time to answer (ms), ARGV[7] envelope type, ARGV[8] envelope content.
-- Returns {verdict, woke, message id}: 'ok' (woke 1: the caller enqueues the addressee's turn),
-- 'unknown' (no such teammate), 'shutdown' (it is shut down) or 'exists' (id taken); only 'ok'
-- writes anything.
-- uses: core, events, messages
-- access: write
-- KEYS: request_key, requests_key, bus_key, bus_seq_key, inbox_key, mate_key, events_key,
--   mate_requests_key
-- ARGV: request_id, kind, sender, addressee, payload, answer_ms, envelope_type, envelope
local status = redis.call('HGET', KEYS[6], 'status')
if not status then return {'unknown', 0, ''} end
if status == 'shutdown' then return {'shutdown', 0, ''} end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists', 0, ''} end
local now = now_ms()
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'kind', ARGV[2], 'from', ARGV[3], 'to', ARGV[4],
  'status', 'pending', 'payload', ARGV[5], 'response', '', 'created_ms', now,
  'deadline_ms', now + tonumber(ARGV[6]), 'resolved_ms', 0, 'resolved_by', '',
  'epoch', redis.call('HGET', KEYS[6], 'epoch') or '0')
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('SADD', KEYS[8], ARGV[1])
local id = publish_message(KEYS[3], KEYS[4], 5, 5, ARGV[3], ARGV[4], ARGV[7], '', ARGV[8], now,
  {'request_id', ARGV[1]})
local woke = 0
if status == 'idle' then
  redis.call('HSET', KEYS[6], 'status', 'working', 'idle_reason', '', 'attempts', 0,
    'last_seen_ms', now)
  mate_event(KEYS[7], ARGV[4], 'working', ARGV[1])
  woke = 1
end
request_event(KEYS[7], ARGV[1], 'pending', ARGV[2] .. ' ' .. ARGV[4])
return {'ok', woke, id}
