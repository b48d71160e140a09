-- plan_submit: a teammate in plan mode asks the lead to approve its plan: the record, its index
-- entry and the plan_approval_request in the lead's inbox, in one step; one pending at a time.
-- The record carries the teammate's spawn epoch, and its id joins the teammate's requests set,
-- so a re-spawn expires it.
-- KEYS[1] the new request hash, KEYS[2] requests zset, KEYS[3] bus stream, KEYS[4] bus sequence
-- counter, KEYS[5] the lead's inbox, KEYS[6] the teammate's mate hash, KEYS[7] the hash of its
-- last plan request (KEYS[1] again when it has none), KEYS[8] the team's events stream,
-- KEYS[9] the teammate's requests set (mate_requests).
-- ARGV[1] request id, ARGV[2] teammate name, ARGV[3] the plan, ARGV[4] time to review (ms),
-- ARGV[5] envelope type, ARGV[6] envelope content.
-- Returns {verdict, detail}: 'ok' (detail: the request id, so a replayed call names it),
-- 'not_required' (not in plan mode, or already approved; detail: plan_state) or 'pending'
-- (detail: the pending request's id); only 'ok' writes anything.
-- uses: core, events, messages
-- access: write
-- KEYS: request_key, requests_key, bus_key, bus_seq_key, lead_inbox_key, mate_key, last_plan_key,
--   events_key, mate_requests_key
-- ARGV: request_id, name, plan, review_ms, envelope_type, envelope
local request_key, requests_key, bus_key, bus_seq_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lead_inbox_key, mate_key, last_plan_key, events_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local mate_requests_key = KEYS[9]
local request_id, name, plan, review_ms, envelope_type = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local envelope = ARGV[6]
local state = redis.call('HGET', mate_key, 'plan_state') or ''
if state ~= 'required' and state ~= 'pending' then return {'not_required', state} end
local now = now_ms()
if state == 'pending' then
  local last = redis.call('HMGET', last_plan_key, 'id', 'status', 'deadline_ms')
  if last[2] == 'pending' and now <= tonumber(last[3]) then return {'pending', last[1]} end
end
redis.call('HSET', request_key, 'id', request_id, 'kind', 'plan_approval', 'from', name,
  'to', 'lead', 'status', 'pending', 'payload', plan, 'response', '', 'created_ms', now,
  'deadline_ms', now + tonumber(review_ms), 'resolved_ms', 0, 'resolved_by', '',
  'epoch', redis.call('HGET', mate_key, 'epoch') or '0')
redis.call('ZADD', requests_key, now, request_id)
redis.call('SADD', mate_requests_key, request_id)
redis.call('HSET', mate_key, 'plan_state', 'pending', 'plan_request', request_id)
publish_message(bus_key, bus_seq_key, {lead_inbox_key}, name, 'lead', envelope_type, '', envelope,
  now,
  {'request_id', request_id})
request_event(events_key, request_id, 'pending', 'plan_approval ' .. name)
return {'ok', request_id}
