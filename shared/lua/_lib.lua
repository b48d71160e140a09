-- Shared helpers, prepended to every board script when it is loaded (Redis 6.2 has no FUNCTIONs).
-- Task hashes hold flat string fields; see shared/board.py for the field list.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function set_status(task_key, counts_key, new_status)
  local old = redis.call('HGET', task_key, 'status')
  if old then redis.call('HINCRBY', counts_key, old, -1) end
  redis.call('HINCRBY', counts_key, new_status, 1)
  redis.call('HSET', task_key, 'status', new_status)
end

local function raise_percent(task_key, floor)
  local p = tonumber(redis.call('HGET', task_key, 'percent') or '0')
  if p < floor then redis.call('HSET', task_key, 'percent', floor) end
end

local function short(text, limit)
  text = string.gsub(text or '', '^%s+', '')
  text = string.gsub(text, '%s+$', '')
  if #text > limit then return string.sub(text, 1, limit) .. '...' end
  return text
end

local function event(events_key, task_id, status, token)
  redis.call('XADD', events_key, 'MAXLEN', '~', 10000, '*',
    'task_id', task_id, 'status', status, 'token', tostring(token or 0))
end

local function make_ready(task_key, ready_key, counts_key, detail)
  set_status(task_key, counts_key, 'ready')
  redis.call('HSET', task_key, 'phase', 'ready', 'detail', detail, 'error', '')
  raise_percent(task_key, 5)
  redis.call('ZADD', ready_key, tonumber(redis.call('HGET', task_key, 'pos')), redis.call('HGET', task_key, 'task_id'))
end

-- Block every pending/ready task among the given keys (a dependents closure) as "dependency failed".
local function block_dependents(first, ready_key, counts_key, events_key, now)
  for i = first, #KEYS do
    local status = redis.call('HGET', KEYS[i], 'status')
    if status == 'pending' or status == 'ready' then
      local tid = redis.call('HGET', KEYS[i], 'task_id')
      redis.call('ZREM', ready_key, tid)
      set_status(KEYS[i], counts_key, 'blocked')
      redis.call('HSET', KEYS[i], 'phase', 'blocked', 'detail', 'Blocked: dependency failed.',
        'error', 'dependency failed', 'percent', 100, 'end_ms', now, 'updated_ms', now)
      event(events_key, tid, 'blocked', 0)
    end
  end
end
