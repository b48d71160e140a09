-- events: a teammate's or a protocol request's change on its team's events stream.

-- A teammate's lifecycle change on its team's events stream, beside the task events: people and
-- the lead wait on it (XREAD BLOCK) instead of polling the mate hashes. Fields: mate, status,
-- detail (why: spawned, woken, a task id, the idle reason, ...).
local function mate_event(events_key, name, status, detail)
  redis.call('XADD', events_key, 'MAXLEN', '~', 10000, '*',
    'mate', name, 'status', status, 'detail', detail or '')
end

-- A protocol request's change on its team's events stream. Fields: request, status, detail
-- (the kind and the teammate).
local function request_event(events_key, request_id, status, detail)
  redis.call('XADD', events_key, 'MAXLEN', '~', 10000, '*',
    'request', request_id, 'status', status, 'detail', detail or '')
end
