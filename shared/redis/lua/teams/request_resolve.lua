-- request_resolve: answer a pending protocol request: the record and the response envelope to
-- the requester, in one step. A shutdown approval marks the responder's mate hash, so its turn
-- ends shut down (turn_end.lua), even when the turn is rerun after a crash; a plan review sets
-- the requester's plan_state (approved, or required again) and wakes it if idle. An answer binds
-- only the teammate's current life: a request opened before its last spawn (another epoch), or
-- a plan request that is not its current one (plan_request), is refused.
-- KEYS[1] the request hash, KEYS[2] bus stream, KEYS[3] bus sequence counter, KEYS[4] the
-- requester's inbox, KEYS[5] the teammate's mate hash (the responder of a shutdown request, the
-- requester of a plan approval), KEYS[6] the team's events stream, KEYS[7] the teammate's
-- requests set (mate_requests).
-- ARGV[1] request id, ARGV[2] expected kind, ARGV[3] responder, ARGV[4] '1' approve / '0'
-- reject, ARGV[5] response text, ARGV[6] envelope type, ARGV[7] envelope content, ARGV[8] the
-- teammate's name (its mate hash is KEYS[5]).
-- Returns {verdict, detail, woke}: 'ok' (detail: the message id; woke 1: the caller enqueues the
-- teammate's turn), 'unknown', 'wrong_kind' (detail: the kind), 'wrong_responder' (detail: the
-- addressee), 'resolved' (detail: its status) or 'stale' (detail: a plan's teammate's current
-- plan request, '' for none or for a shutdown request). Only 'ok' writes, except that a pending
-- record past its deadline is first marked expired (a stale one too, so listings show it ended).
-- uses: core, events, messages
-- access: write
-- KEYS: request_key, bus_key, bus_seq_key, inbox_key, mate_key, events_key, mate_requests_key
-- ARGV: request_id, kind, responder, approve, response, envelope_type, envelope, name
local request_key, bus_key, bus_seq_key, inbox_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mate_key, events_key, mate_requests_key = KEYS[5], KEYS[6], KEYS[7]
local request_id, kind, responder, approve, response = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local envelope_type, envelope, name = ARGV[6], ARGV[7], ARGV[8]
local f = redis.call('HMGET', request_key, 'kind', 'to', 'status', 'deadline_ms', 'from', 'epoch')
if not f[1] then return {'unknown', '', 0} end
if f[1] ~= kind then return {'wrong_kind', f[1], 0} end
if f[2] ~= responder then return {'wrong_responder', f[2], 0} end
if f[3] ~= 'pending' then return {'resolved', f[3], 0} end
local subject = f[2]
if kind == 'plan_approval' then subject = f[5] end
if subject ~= name then
  return redis.error_reply('request_resolve: mate_key is not the hash of the request\'s teammate')
end
local now = now_ms()
if now > tonumber(f[4]) then
  redis.call('HSET', request_key, 'status', 'expired', 'resolved_ms', now, 'resolved_by', 'system')
  redis.call('SREM', mate_requests_key, request_id)
  request_event(events_key, request_id, 'expired', f[1])
  return {'resolved', 'expired', 0}
end
local mate = redis.call('HMGET', mate_key, 'epoch', 'plan_request')
local current = ''
if kind == 'plan_approval' then current = mate[2] or '' end
if (f[6] or '0') ~= (mate[1] or '0') then return {'stale', current, 0} end
if kind == 'plan_approval' and current ~= request_id then return {'stale', current, 0} end
local status = 'rejected'
if approve == '1' then status = 'approved' end
redis.call('HSET', request_key, 'status', status, 'response', response, 'resolved_ms', now,
  'resolved_by', responder)
redis.call('SREM', mate_requests_key, request_id)
local id = publish_message(bus_key, bus_seq_key, {inbox_key}, responder, f[5], envelope_type, '',
  envelope, now,
  {'request_id', request_id, 'approve', approve})
local woke = 0
if kind == 'shutdown' and status == 'approved' then
  redis.call('HSET', mate_key, 'shutdown_request', request_id)
elseif kind == 'plan_approval' then
  local state = 'required'
  if status == 'approved' then state = 'approved' end
  redis.call('HSET', mate_key, 'plan_state', state, 'plan_request', '')
  if redis.call('HGET', mate_key, 'status') == 'idle' then
    redis.call('HSET', mate_key, 'status', 'working', 'idle_reason', '', 'attempts', 0,
      'last_seen_ms', now)
    mate_event(events_key, f[5], 'working', request_id)
    woke = 1
  end
end
request_event(events_key, request_id, status, kind .. ' ' .. responder)
return {'ok', id, woke}
