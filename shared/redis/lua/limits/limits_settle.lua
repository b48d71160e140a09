-- limits_settle: after one model attempt, in one step: what the provider said of its limits
-- (learned rpm/tpm, a model out of its quota until a reset, a 429 that pauses the account), the
-- TPM bucket set to the tokens really used, and the budget reservation released while the real
-- usage is charged to the run's or team's totals (and the task's, for a member's call).
-- KEYS[1] the account hash, KEYS[2] the model's bucket hash, KEYS[3] (optional) the usage hash,
-- KEYS[4] its reservations sorted set, KEYS[5] (optional) the hash of the task the call was
-- made for (its usage_* fields count every call, whatever the attempt's fate).
-- ARGV[1] the reservation member ('' none), ARGV[2] tokens the take counted against TPM,
-- ARGV[3] prompt tokens, ARGV[4] completion tokens, ARGV[5] cost usd, ARGV[6] '1' if unpriced,
-- ARGV[7] max tokens ('' none), ARGV[8] max usd ('' none), ARGV[9] learned rpm ('' none),
-- ARGV[10] learned tpm ('' none), ARGV[11] ms the model is out of quota for ('' none),
-- ARGV[12] ms the account is paused for ('' none, 'backoff': a 429 that named no time: 1 s,
-- doubling up to ARGV[14] while they keep coming), ARGV[13] bucket ttl ms, ARGV[14] longest
-- backoff ms, ARGV[15] configured tpm ('' none), ARGV[16] '1' if the call was answered (charged),
-- ARGV[17] the model string (shown), ARGV[18] the share of the lowest limit the take used.
-- Returns {exceeded reason or '', 1 if this call crossed a limit else 0, account pause ms}.
-- uses: core
-- access: write
-- KEYS: account_key, bucket_key, usage_key?, reservations_key?, task_key?
-- ARGV: reservation, counted_tokens, prompt_tokens, completion_tokens, cost_usd, unpriced,
--   max_tokens, max_usd, learned_rpm, learned_tpm, quota_out_ms, paused_ms, bucket_ttl_ms,
--   longest_backoff_ms, configured_tpm, answered, model, share
local account_key, bucket_key, usage_key, reservations_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local task_key = KEYS[5]
local reservation, counted_tokens, prompt_tokens = ARGV[1], ARGV[2], ARGV[3]
local completion_tokens, cost_usd, unpriced, max_tokens = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local max_usd, learned_rpm, learned_tpm, quota_out_ms = ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local paused_ms, bucket_ttl_ms, longest_backoff_ms = ARGV[12], ARGV[13], ARGV[14]
local configured_tpm, answered, model, share = ARGV[15], ARGV[16], ARGV[17], ARGV[18]
local now = now_ms()
local ttl = tonumber(bucket_ttl_ms)

local function number(value) return tonumber(value) or 0 end

local bucket = {}
if learned_rpm ~= '' then table.insert(bucket, 'rpm'); table.insert(bucket, learned_rpm) end
if learned_tpm ~= '' then table.insert(bucket, 'tpm'); table.insert(bucket, learned_tpm) end
if quota_out_ms ~= '' then
  table.insert(bucket, 'paused_until'); table.insert(bucket, now + tonumber(quota_out_ms))
end
-- The tokens really used move the TPM bucket's arrival time by what the estimate missed.
local b = redis.call('HMGET', bucket_key, 'tpm', 'tat_tok')
local tpm = tonumber(learned_tpm) or tonumber(b[1])
if tonumber(configured_tpm) and (not tpm or tonumber(configured_tpm) < tpm) then
  tpm = tonumber(configured_tpm)
end
if tpm then tpm = tpm * tonumber(share) end
if tpm and tpm > 0 and b[2] then
  local used = number(prompt_tokens) + number(completion_tokens)
  local tat = tonumber(b[2]) + (used - tonumber(counted_tokens)) * 60000 / tpm
  table.insert(bucket, 'tat_tok'); table.insert(bucket, tostring(tat))
end
if #bucket > 0 then
  table.insert(bucket, 'model'); table.insert(bucket, model)
  redis.call('HSET', bucket_key, unpack(bucket))
  redis.call('PEXPIRE', bucket_key, ttl + number(quota_out_ms))
end

local pause = 0
if paused_ms == 'backoff' then
  local last = number(redis.call('HGET', account_key, 'backoff_ms'))
  pause = math.min(tonumber(longest_backoff_ms), math.max(1000, last * 2))
  redis.call('HSET', account_key, 'backoff_ms', pause)
elseif paused_ms ~= '' then
  pause = tonumber(paused_ms)
end
if pause > 0 then
  local until_ms = now + pause
  if until_ms > number(redis.call('HGET', account_key, 'paused_until')) then
    redis.call('HSET', account_key, 'paused_until', until_ms)
  end
  redis.call('PEXPIRE', account_key, pause + ttl)
elseif answered == '1' then
  redis.call('HDEL', account_key, 'backoff_ms')  -- answered: the next unnamed 429 starts at 1 s
end

if not usage_key then return {'', 0, pause} end
if reservation ~= '' and redis.call('ZREM', reservations_key, reservation) == 1 then
  local _, tokens, usd = string.match(reservation, '^(.-):([%d.]+):([%d.eE+-]+)$')
  redis.call('HINCRBY', usage_key, 'reserved_tokens', -tonumber(tokens))
  redis.call('HINCRBYFLOAT', usage_key, 'reserved_usd', -tonumber(usd))
end
if answered ~= '1' then return {'', 0, pause} end
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
local u = redis.call('HMGET', usage_key, 'prompt_tokens', 'completion_tokens', 'added_tokens',
                     'added_usd')
local tokens = number(u[1]) + number(u[2])
local reason = ''
if max_tokens ~= '' and tokens >= tonumber(max_tokens) + number(u[3]) then
  reason = 'budget exceeded: ' .. tokens .. ' tokens used, max_tokens is '
    .. (tonumber(max_tokens) + number(u[3]))
elseif max_usd ~= '' and tonumber(cost) >= tonumber(max_usd) + number(u[4]) then
  reason = 'budget exceeded: $' .. cost .. ' spent, max_cost_usd is '
    .. (tonumber(max_usd) + number(u[4]))
end
local crossed = 0
if reason ~= '' then crossed = redis.call('HSETNX', usage_key, 'budget_exceeded', reason) end
return {redis.call('HGET', usage_key, 'budget_exceeded') or '', crossed, pause}
