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
local now = now_ms()
local ttl = tonumber(ARGV[13])

local function number(value) return tonumber(value) or 0 end

local bucket = {}
if ARGV[9] ~= '' then table.insert(bucket, 'rpm'); table.insert(bucket, ARGV[9]) end
if ARGV[10] ~= '' then table.insert(bucket, 'tpm'); table.insert(bucket, ARGV[10]) end
if ARGV[11] ~= '' then
  table.insert(bucket, 'paused_until'); table.insert(bucket, now + tonumber(ARGV[11]))
end
-- The tokens really used move the TPM bucket's arrival time by what the estimate missed.
local b = redis.call('HMGET', KEYS[2], 'tpm', 'tat_tok')
local tpm = tonumber(ARGV[10]) or tonumber(b[1])
if tonumber(ARGV[15]) and (not tpm or tonumber(ARGV[15]) < tpm) then tpm = tonumber(ARGV[15]) end
if tpm then tpm = tpm * tonumber(ARGV[18]) end
if tpm and tpm > 0 and b[2] then
  local used = number(ARGV[3]) + number(ARGV[4])
  local tat = tonumber(b[2]) + (used - tonumber(ARGV[2])) * 60000 / tpm
  table.insert(bucket, 'tat_tok'); table.insert(bucket, tostring(tat))
end
if #bucket > 0 then
  table.insert(bucket, 'model'); table.insert(bucket, ARGV[17])
  redis.call('HSET', KEYS[2], unpack(bucket))
  redis.call('PEXPIRE', KEYS[2], ttl + number(ARGV[11]))
end

local pause = 0
if ARGV[12] == 'backoff' then
  local last = number(redis.call('HGET', KEYS[1], 'backoff_ms'))
  pause = math.min(tonumber(ARGV[14]), math.max(1000, last * 2))
  redis.call('HSET', KEYS[1], 'backoff_ms', pause)
elseif ARGV[12] ~= '' then
  pause = tonumber(ARGV[12])
end
if pause > 0 then
  local until_ms = now + pause
  if until_ms > number(redis.call('HGET', KEYS[1], 'paused_until')) then
    redis.call('HSET', KEYS[1], 'paused_until', until_ms)
  end
  redis.call('PEXPIRE', KEYS[1], pause + ttl)
elseif ARGV[16] == '1' then
  redis.call('HDEL', KEYS[1], 'backoff_ms')  -- answered: the next unnamed 429 starts at 1 s
end

if not KEYS[3] then return {'', 0, pause} end
if ARGV[1] ~= '' and redis.call('ZREM', KEYS[4], ARGV[1]) == 1 then
  local _, tokens, usd = string.match(ARGV[1], '^(.-):([%d.]+):([%d.eE+-]+)$')
  redis.call('HINCRBY', KEYS[3], 'reserved_tokens', -tonumber(tokens))
  redis.call('HINCRBYFLOAT', KEYS[3], 'reserved_usd', -tonumber(usd))
end
if ARGV[16] ~= '1' then return {'', 0, pause} end
redis.call('HINCRBY', KEYS[3], 'prompt_tokens', ARGV[3])
redis.call('HINCRBY', KEYS[3], 'completion_tokens', ARGV[4])
local cost = redis.call('HINCRBYFLOAT', KEYS[3], 'cost_usd', ARGV[5])
if ARGV[6] == '1' then redis.call('HSET', KEYS[3], 'unpriced', 1) end
if KEYS[5] and redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('HINCRBY', KEYS[5], 'usage_prompt_tokens', ARGV[3])
  redis.call('HINCRBY', KEYS[5], 'usage_completion_tokens', ARGV[4])
  redis.call('HINCRBYFLOAT', KEYS[5], 'usage_cost_usd', ARGV[5])
  if ARGV[6] == '1' then redis.call('HSET', KEYS[5], 'usage_unpriced', 1) end
end
local u = redis.call('HMGET', KEYS[3], 'prompt_tokens', 'completion_tokens', 'added_tokens',
                     'added_usd')
local tokens = number(u[1]) + number(u[2])
local reason = ''
if ARGV[7] ~= '' and tokens >= tonumber(ARGV[7]) + number(u[3]) then
  reason = 'budget exceeded: ' .. tokens .. ' tokens used, max_tokens is '
    .. (tonumber(ARGV[7]) + number(u[3]))
elseif ARGV[8] ~= '' and tonumber(cost) >= tonumber(ARGV[8]) + number(u[4]) then
  reason = 'budget exceeded: $' .. cost .. ' spent, max_cost_usd is '
    .. (tonumber(ARGV[8]) + number(u[4]))
end
local crossed = 0
if reason ~= '' then crossed = redis.call('HSETNX', KEYS[3], 'budget_exceeded', reason) end
return {redis.call('HGET', KEYS[3], 'budget_exceeded') or '', crossed, pause}
