-- messages: a message on the run's (or team's) bus, indexed in the inboxes it is for.

-- Append a message to the run's bus (the fields shared/bus.py reads) and index it in the inboxes
-- `inbox_keys` (a list, empty for a message to the lead of a planned run); returns the message
-- id. created_at is Redis's clock (now_ms), so it agrees with the stream order whatever the
-- publishers' clocks say. publish.lua uses it, and so do complete and fail, which announce
-- task.result / task.error in the same step as the state change.
-- `extra` (optional) is a flat list of more fields, e.g. {'request_id', id, 'approve', '1'} on
-- the teammates' protocol messages.
local function publish_message(bus_key, seq_key, inbox_keys, from, to, mtype, task_id, content,
                               created_at, extra)
  local fields = {'from', from, 'to', to, 'type', mtype, 'task_id', task_id,
    'content', content, 'created_at', created_at}
  for _, value in ipairs(extra or {}) do fields[#fields + 1] = value end
  local id = redis.call('XADD', bus_key, '*', unpack(fields))
  local seq = redis.call('INCR', seq_key)
  for _, inbox_key in ipairs(inbox_keys) do
    redis.call('XADD', inbox_key, id, 'seq', seq)
  end
  -- After the run ended its keys expire (shared/runs/retention.py); keys a late message creates must
  -- not outlive the bus.
  local ttl = redis.call('PTTL', bus_key)
  if ttl > 0 then
    redis.call('PEXPIRE', seq_key, ttl)
    for _, inbox_key in ipairs(inbox_keys) do
      redis.call('PEXPIRE', inbox_key, ttl)
    end
  end
  return id
end
