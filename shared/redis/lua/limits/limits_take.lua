-- limits_take: before one model call, in one step: the account's pause, a rate slot in the
-- model's RPM and TPM buckets (GCRA: each caller gets the earliest slot its theoretical arrival
-- times allow and moves them on, so callers are served in the order they asked) and a
-- reservation of the call's worst case against the run's or team's budget.
-- KEYS[1] the account hash (paused_until ms), KEYS[2] the model's bucket hash (model, rpm, tpm
-- learned; tat_req, tat_tok, paused_until ms), KEYS[3] (optional) the usage hash of the run or
-- team whose budget pays, KEYS[4] its reservations sorted set (member id:tokens:usd, scored by
-- expiry ms).
-- ARGV[1] the model string (shown), ARGV[2] configured rpm ('' none), ARGV[3] configured tpm
-- ('' none), ARGV[4] tokens the call counts against TPM, ARGV[5] wait limit ms ('' none),
-- ARGV[6] bucket ttl ms, ARGV[7] reservation id, ARGV[8] worst-case tokens, ARGV[9] worst-case
-- usd, ARGV[10] max tokens ('' none), ARGV[11] max usd ('' none), ARGV[12] reservation ttl ms
-- (past the slot), ARGV[13] how many expired reservations to trim at most, ARGV[14] '0' to take
-- no rate slot (the limiter is off: the budget's reservation only), ARGV[15] the share of the
-- lowest known limit the slots use (a request reaches the provider a little after its slot).
-- Returns {verdict, wait ms, detail, 1 if this refusal spent the budget first else 0}: 'ok'
-- (detail: the reservation member or ''), 'far' (the slot is past the wait limit: nothing
-- taken), 'wait' (others' reservations hold the budget the call needs: nothing taken), 'spent'
-- (detail: why the budget cannot cover the call, also kept in the usage hash's budget_exceeded
-- field when it is the first reason). The usage hash keeps the latest call's worst case
-- (next_tokens, next_usd): what a top-up must cover.
-- uses: core
-- access: write
-- KEYS: account_key, bucket_key, usage_key?, reservations_key?
-- ARGV: model, configured_rpm, configured_tpm, counted_tokens, wait_limit_ms, bucket_ttl_ms,
--   reservation, worst_tokens, worst_usd, max_tokens, max_usd, reservation_ttl_ms, trim_max,
--   take_slot, share
local account_key, bucket_key, usage_key, reservations_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local model, configured_rpm, configured_tpm, counted_tokens = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local wait_limit_ms, bucket_ttl_ms, reservation, worst_tokens = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local worst_usd, max_tokens, max_usd, reservation_ttl_ms = ARGV[9], ARGV[10], ARGV[11], ARGV[12]
local trim_max, take_slot, share = ARGV[13], ARGV[14], ARGV[15]
local now = now_ms()

local function lowest(a, b)
  local x, y = tonumber(a), tonumber(b)
  if x and x > 0 and y and y > 0 then return math.min(x, y) end
  if x and x > 0 then return x end
  if y and y > 0 then return y end
  return nil
end

-- Give back what an expired reservation held (its worker died before settling).
local function release(member)
  if redis.call('ZREM', reservations_key, member) == 1 then
    local _, tokens, usd = string.match(member, '^(.-):([%d.]+):([%d.eE+-]+)$')
    redis.call('HINCRBY', usage_key, 'reserved_tokens', -tonumber(tokens))
    redis.call('HINCRBYFLOAT', usage_key, 'reserved_usd', -tonumber(usd))
  end
end

local function number(value) return tonumber(value) or 0 end

-- The budget: nil when it covers the worst case, else {'wait' | 'spent', reason}.
local function budget_refusal()
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', reservations_key, '-inf', now, 'LIMIT', 0,
                                     tonumber(trim_max))) do
    release(member)
  end
  local u = redis.call('HMGET', usage_key, 'prompt_tokens', 'completion_tokens', 'cost_usd',
                       'reserved_tokens', 'reserved_usd', 'added_tokens', 'added_usd')
  local reserved = number(u[4]) > 0 or number(u[5]) > 1e-12
  if max_tokens ~= '' then
    local max, used = tonumber(max_tokens) + number(u[6]), number(u[1]) + number(u[2])
    if used >= max or (not reserved and used + tonumber(worst_tokens) > max) then
      return {'spent', 'budget exceeded: ' .. used .. ' tokens used, the next call may take '
        .. worst_tokens .. ', max_tokens is ' .. max}
    end
    if used + number(u[4]) + tonumber(worst_tokens) > max then return {'wait', ''} end
  end
  if max_usd ~= '' then
    local max, used = tonumber(max_usd) + number(u[7]), number(u[3])
    if used >= max or (not reserved and used + tonumber(worst_usd) > max) then
      return {'spent', 'budget exceeded: $' .. used .. ' spent, the next call may cost $'
        .. worst_usd .. ', max_cost_usd is ' .. max}
    end
    if used + number(u[5]) + tonumber(worst_usd) > max then return {'wait', ''} end
  end
  return nil
end

if usage_key then
  redis.call('HSET', usage_key, 'next_tokens', worst_tokens, 'next_usd', worst_usd)
  local refusal = budget_refusal()
  if refusal and refusal[1] == 'spent' then
    -- Kept on the totals, as a charge that crosses a limit keeps it: no new call starts, and
    -- the first refusal is told (1) as the crossing call was.
    local first = redis.call('HSETNX', usage_key, 'budget_exceeded', refusal[2])
    return {'spent', 0, redis.call('HGET', usage_key, 'budget_exceeded'), first}
  end
  if refusal then return {refusal[1], 0, refusal[2], 0} end
end

if take_slot == '0' then
  local member = reservation .. ':' .. worst_tokens .. ':' .. worst_usd
  redis.call('ZADD', reservations_key, now + tonumber(reservation_ttl_ms), member)
  redis.call('HINCRBY', usage_key, 'reserved_tokens', worst_tokens)
  redis.call('HINCRBYFLOAT', usage_key, 'reserved_usd', worst_usd)
  return {'ok', 0, member, 0}
end

local slot = now
local account_pause = tonumber(redis.call('HGET', account_key, 'paused_until'))
if account_pause and account_pause > slot then slot = account_pause end
local b = redis.call('HMGET', bucket_key, 'rpm', 'tpm', 'tat_req', 'tat_tok', 'paused_until')
local share = tonumber(share)
local rpm, tpm = lowest(configured_rpm, b[1]), lowest(configured_tpm, b[2])
if rpm then rpm = rpm * share end
if tpm then tpm = tpm * share end
local model_pause = tonumber(b[5])
if model_pause and model_pause > slot then slot = model_pause end
local req_ms, tok_ms
if rpm then
  -- Burst: one second's worth of requests, at least one.
  req_ms = 60000 / rpm
  local tau = (math.max(1, rpm / 60) - 1) * req_ms
  slot = math.max(slot, number(b[3]) - tau)
end
if tpm then
  tok_ms = 60000 / tpm
  slot = math.max(slot, number(b[4]) - 1000)  -- one second's worth of tokens
end
if wait_limit_ms ~= '' and slot - now > tonumber(wait_limit_ms) then return {'far', slot - now, '',
  0} end
if rpm or tpm then
  local fields = {'model', model}
  if rpm then
    table.insert(fields, 'tat_req')
    table.insert(fields, tostring(math.max(number(b[3]), slot) + req_ms))
  end
  if tpm then
    table.insert(fields, 'tat_tok')
    table.insert(fields, tostring(math.max(number(b[4]), slot) + tonumber(counted_tokens) * tok_ms))
  end
  redis.call('HSET', bucket_key, unpack(fields))
  redis.call('PEXPIRE', bucket_key, math.floor(slot - now + tonumber(bucket_ttl_ms)))
end
local member = ''
if usage_key then
  member = reservation .. ':' .. worst_tokens .. ':' .. worst_usd
  redis.call('ZADD', reservations_key, slot + tonumber(reservation_ttl_ms), member)
  redis.call('HINCRBY', usage_key, 'reserved_tokens', worst_tokens)
  redis.call('HINCRBYFLOAT', usage_key, 'reserved_usd', worst_usd)
end
return {'ok', math.floor(slot - now), member, 0}
