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
local request_key, requests_key, bus_key, bus_seq_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local inbox_key, mate_key, events_key, mate_requests_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local request_id, kind, sender, addressee, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local answer_ms, envelope_type, envelope = ARGV[6], ARGV[7], ARGV[8]
local status = redis.call('HGET', mate_key, 'status')
if not status then return {'unknown', 0, ''} end
if status == 'shutdown' then return {'shutdown', 0, ''} end
if redis.call('EXISTS', request_key) == 1 then return {'exists', 0, ''} end
local now = now_ms()
redis.call('HSET', request_key, 'id', request_id, 'kind', kind, 'from', sender, 'to', addressee,
  'status', 'pending', 'payload', payload, 'response', '', 'created_ms', now,
  'deadline_ms', now + tonumber(answer_ms), 'resolved_ms', 0, 'resolved_by', '',
  'epoch', redis.call('HGET', mate_key, 'epoch') or '0')
redis.call('ZADD', requests_key, now, request_id)
redis.call('SADD', mate_requests_key, request_id)
local id = publish_message(bus_key, bus_seq_key, {inbox_key}, sender, addressee, envelope_type, '',
  envelope, now,
  {'request_id', request_id})
local woke = 0
if status == 'idle' then
  redis.call('HSET', mate_key, 'status', 'working', 'idle_reason', '', 'attempts', 0,
    'last_seen_ms', now)
  mate_event(events_key, addressee, 'working', request_id)
  woke = 1
end
request_event(events_key, request_id, 'pending', kind .. ' ' .. addressee)
return {'ok', woke, id}
