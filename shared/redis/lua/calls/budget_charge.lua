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
local usage_key, task_key = KEYS[1], KEYS[2]
local prompt_tokens, completion_tokens, cost_usd, unpriced = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local max_tokens, max_cost_usd = ARGV[5], ARGV[6]
redis.call('HINCRBY', usage_key, 'prompt_tokens', prompt_tokens)
redis.call('HINCRBY', usage_key, 'completion_tokens', completion_tokens)
local cost = redis.call('HINCRBYFLOAT', usage_key, 'cost_usd', cost_usd)
if unpriced == '1' then redis.call('HSET', usage_key, 'unpriced', 1) end
if task_key and redis.call('EXISTS', task_key) == 1 then
  redis.call('HINCRBY', task_key, 'usage_prompt_tokens', prompt_tokens)
  redis.call('HINCRBY', task_key, 'usage_completion_tokens', completion_tokens)
  redis.call('HINCRBYFLOAT', task_key, 'usage_cost_usd', cost_usd)
  if unpriced == '1' then redis.call('HSET', task_key, 'usage_unpriced', 1) end
end
local tokens = tonumber(redis.call('HGET', usage_key, 'prompt_tokens'))
  + tonumber(redis.call('HGET', usage_key, 'completion_tokens'))
-- Top-ups (budget_topup.lua) raise each limit; a reason names them when there are some.
local added = redis.call('HMGET', usage_key, 'added_tokens', 'added_usd')
local added_tokens, added_usd = tonumber(added[1] or '0') or 0, tonumber(added[2] or '0') or 0
local reason = ''
if max_tokens ~= '' and tokens >= tonumber(max_tokens) + added_tokens then
  reason = 'budget exceeded: ' .. tokens .. ' tokens used, max_tokens is ' .. max_tokens
  if added_tokens > 0 then reason = reason .. ' + ' .. added[1] .. ' added' end
elseif max_cost_usd ~= '' and tonumber(cost) >= tonumber(max_cost_usd) + added_usd then
  reason = 'budget exceeded: $' .. cost .. ' spent, max_cost_usd is ' .. max_cost_usd
  if added_usd > 0 then reason = reason .. ' + ' .. added[2] .. ' added' end
end
local crossed = 0
if reason ~= '' then crossed = redis.call('HSETNX', usage_key, 'budget_exceeded', reason) end
return {tokens, tostring(cost), redis.call('HGET', usage_key, 'budget_exceeded') or '', crossed}
