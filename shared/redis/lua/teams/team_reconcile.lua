-- team_reconcile: find working teammates whose turn is gone (a killed worker, a lost job) and
-- rerun them from their checkpoint, up to a limit; past it, set them idle (shut down, when they
-- had approved a shutdown), give their team tasks back to the board (not to them again) and tell
-- the lead. Teammates whose turn job still waits in its queue are not passed: that is no crash.
-- KEYS[1] bus stream, KEYS[2] bus sequence counter, KEYS[3] the lead's inbox,
-- KEYS[4..] pairs: a mate hash, its turn key; then ready zset, running set, counts hash, token
-- counter, events stream; then the in-progress task hashes.
-- ARGV[1] stale after ms (no lease and not seen for this long), ARGV[2] max turn attempts,
-- ARGV[3..] the teammates' names, in the order of the pairs.
-- Returns {verdict, names, released}: 'ok', or 'retry' (the running tasks changed since the
-- caller read them; nothing changed); the names whose turn the caller enqueues again (attempts
-- bumped, seen now, so the next reconcile waits for that job before counting another attempt);
-- how many tasks went back to the board (the caller wakes teammates for them).
-- uses: core, team, events, messages
-- access: write
-- KEYS: bus_key, bus_seq_key, lead_inbox_key, mate_and_board_keys...
-- ARGV: stale_ms, max_attempts, names...
local bus_key, bus_seq_key, lead_inbox_key = KEYS[1], KEYS[2], KEYS[3]
local mate_and_board_keys_from = 4  -- KEYS[mate_and_board_keys_from..]
local stale_ms, max_attempts = ARGV[1], ARGV[2]
local names_from = 3  -- ARGV[names_from..]
local now = now_ms()
local stale_ms, max_attempts = tonumber(stale_ms), tonumber(max_attempts)
-- After the pairs (one per name) come the board's keys, then the in-progress task hashes.
local board = mate_and_board_keys_from + 2 * (#ARGV - names_from + 1)
local ready_key, running_key, counts_key = KEYS[board], KEYS[board + 1], KEYS[board + 2]
local events_key = KEYS[board + 4]
local held_keys_from = board + 5
local rerun, released = {}, 0
if not snapshot_current(running_key, held_keys_from, #KEYS) then return {'retry', {}, 0} end
for i = names_from, #ARGV do
  local pair = mate_and_board_keys_from + (i - names_from) * 2
  local mate, turn = KEYS[pair], KEYS[pair + 1]
  local fields = redis.call('HMGET', mate, 'status', 'last_seen_ms', 'attempts',
    'shutdown_request')
  if fields[1] == 'working' and redis.call('EXISTS', turn) == 0
      and now - tonumber(fields[2] or '0') > stale_ms then
    local attempts = tonumber(fields[3] or '0') + 1
    if attempts > max_attempts then
      local err = 'turn lost ' .. max_attempts .. ' times (worker died or job lost)'
      -- A teammate that approved its shutdown ends shut down, as its turn would have.
      local ending = 'idle'
      if (fields[4] or '') ~= '' then ending = 'shutdown' end
      redis.call('HSET', mate, 'status', ending, 'idle_reason', 'error: ' .. err,
        'last_error', err, 'turn_token', '', 'attempts', 0, 'last_seen_ms', now)
      for _, task_key in ipairs(team_held(held_keys_from, #KEYS, ARGV[i])) do
        team_release(task_key, ready_key, running_key, counts_key, events_key,
          ARGV[i] .. "'s turn was lost " .. max_attempts .. ' times', now)
        redis.call('HSET', task_key, 'released_from', ARGV[i])
        released = released + 1
      end
      publish_message(bus_key, bus_seq_key, {lead_inbox_key}, 'system', 'lead', 'teammate.error',
        '',
        ARGV[i] .. ' is ' .. ending .. ' after an error: ' .. err, now)
      mate_event(events_key, ARGV[i], ending, 'error: ' .. err)
    else
      redis.call('HSET', mate, 'attempts', attempts, 'last_seen_ms', now)
      mate_event(events_key, ARGV[i], 'working', 'rerun ' .. attempts)
      rerun[#rerun + 1] = ARGV[i]
    end
  end
end
return {'ok', rerun, released}
