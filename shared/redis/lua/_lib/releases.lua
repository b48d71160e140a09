-- releases: bounded releases (team tasks and a planned run's team_release_task).
-- uses: tasks

-- A task hash counts its releases (`releases`) and keeps the last RELEASE_HISTORY releasers
-- (`released_by`, csv, oldest first), so a task nobody finishes cannot pass between members for
-- ever: past its bound it fails with that history as its error.
local RELEASE_HISTORY = 10

-- Note a release of the task by `name`. Returns whether the task is past `bound` (its releases
-- already reached it; '' or nil = unbounded): then the caller fails it instead of releasing it
-- (`releases` counts the releases actually made; the history names the last holder too).
local function note_release(task_key, name, bound)
  local names = {}
  for item in string.gmatch(redis.call('HGET', task_key, 'released_by') or '', '[^,]+') do
    names[#names + 1] = item
  end
  names[#names + 1] = name
  while #names > RELEASE_HISTORY do table.remove(names, 1) end
  redis.call('HSET', task_key, 'released_by', table.concat(names, ','))
  local limit = tonumber(bound or '')
  local made = tonumber(redis.call('HGET', task_key, 'releases') or '0') or 0
  if limit and made >= limit then return true end
  redis.call('HSET', task_key, 'releases', made + 1)
  return false
end

-- The error of a task failed past its release bound: how often and by whom it was given up.
local function releases_error(task_key, setting)
  local f = redis.call('HMGET', task_key, 'releases', 'released_by')
  return 'released ' .. (f[1] or '0') .. ' times (' .. setting .. '), given up in turn by '
    .. (string.gsub(f[2] or '', ',', ', '))
end

-- Fail a held task (no release): its claim ends (token revoked), it leaves the running set and
-- the ready zset, `error` and `detail` say why. The caller blocks or names its dependents.
local function fail_held(task_key, ready_key, running_key, counts_key, events_key, error_text,
                         now)
  local tid = redis.call('HGET', task_key, 'task_id')
  set_status(task_key, counts_key, 'failed')
  redis.call('SREM', running_key, tid)
  redis.call('ZREM', ready_key, tid)
  leave_lane(task_key, tid)
  redis.call('HSET', task_key, 'token', 0, 'phase', 'failed', 'detail', error_text,
    'error', error_text, 'percent', 100, 'end_ms', now, 'updated_ms', now,
    'last_heartbeat_ms', now, 'requeue_reason', '', 'reminded', '0')
  task_event(events_key, task_key, 'failed', 0)
end
