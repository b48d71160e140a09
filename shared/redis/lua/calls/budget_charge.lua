-- budget_charge: add one model call's usage to a run's or a team's totals and say whether the
-- budget is spent.
-- KEYS[1] the usage hash (the same fields RunStore.usage and TeamStore.usage read), KEYS[2]
-- (optional) the hash of the task the call was made for: its usage_* fields count every call,
-- whatever the attempt's fate (a lost or released attempt writes no outcome, but its calls were
-- paid for).
-- ARGV[1] prompt tokens, ARGV[2] completion tokens, ARGV[3] cost usd, ARGV[4] '1' if unpriced,
-- ARGV[5] max tokens ('' = no limit), ARGV[6] max cost usd ('' = no limit), as configured: the
-- hash's added_tokens / added_usd are added to them.
-- Returns {total tokens, total cost usd as a string, exceeded reason or '', 1 if this call is the
-- one that crossed a limit else 0}. The crossing call records the reason in the hash field
-- 'budget_exceeded'; later calls keep it.
-- access: write
-- KEYS: usage_key, task_key?
-- ARGV: prompt_tokens, completion_tokens, cost_usd, unpriced, max_tokens, max_cost_usd
redis.call('HINCRBY', KEYS[1], 'prompt_tokens', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'completion_tokens', ARGV[2])
local cost = redis.call('HINCRBYFLOAT', KEYS[1], 'cost_usd', ARGV[3])
if ARGV[4] == '1' then redis.call('HSET', KEYS[1], 'unpriced', 1) end
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HINCRBY', KEYS[2], 'usage_prompt_tokens', ARGV[1])
  redis.call('HINCRBY', KEYS[2], 'usage_completion_tokens', ARGV[2])
  redis.call('HINCRBYFLOAT', KEYS[2], 'usage_cost_usd', ARGV[3])
  if ARGV[4] == '1' then redis.call('HSET', KEYS[2], 'usage_unpriced', 1) end
end
local tokens = tonumber(redis.call('HGET', KEYS[1], 'prompt_tokens'))
  + tonumber(redis.call('HGET', KEYS[1], 'completion_tokens'))
-- Top-ups (budget_topup.lua) raise each limit; a reason names them when there are some.
local added = redis.call('HMGET', KEYS[1], 'added_tokens', 'added_usd')
local added_tokens, added_usd = tonumber(added[1] or '0') or 0, tonumber(added[2] or '0') or 0
local reason = ''
if ARGV[5] ~= '' and tokens >= tonumber(ARGV[5]) + added_tokens then
  reason = 'budget exceeded: ' .. tokens .. ' tokens used, max_tokens is ' .. ARGV[5]
  if added_tokens > 0 then reason = reason .. ' + ' .. added[1] .. ' added' end
elseif ARGV[6] ~= '' and tonumber(cost) >= tonumber(ARGV[6]) + added_usd then
  reason = 'budget exceeded: $' .. cost .. ' spent, max_cost_usd is ' .. ARGV[6]
  if added_usd > 0 then reason = reason .. ' + ' .. added[2] .. ' added' end
end
local crossed = 0
if reason ~= '' then crossed = redis.call('HSETNX', KEYS[1], 'budget_exceeded', reason) end
return {tokens, tostring(cost), redis.call('HGET', KEYS[1], 'budget_exceeded') or '', crossed}
