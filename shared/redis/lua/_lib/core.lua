-- core: the server's clock, a late write's expiry and fencing tokens, which most scripts need.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A fencing token: the next value of `counter_key`, '@', and this server's epoch. A failover can
-- lose the last acknowledged writes (replication is asynchronous), the counter's latest values
-- among them, so the promoted replica would issue a token again that a cut-off holder still
-- has. The epoch changes whenever that can happen: master_replid is new on every promotion and
-- run_id on every restart (a restart may lose writes too), so a token from before is never
-- equal to one after, while within an epoch the counter alone orders them. Read inside the
-- script, so the epoch is the server's that applies the claim. (The alternative, WAIT for a
-- replica before a claim is acknowledged, costs a replication round trip per claim and still
-- loses to a failover to a replica it did not wait for: bench/bench_failover.py.)
local function fencing_token(counter_key)
  local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  local epoch = string.sub(redis.sha1hex(run_id .. replid), 1, 12)
  return redis.call('INCR', counter_key) .. '@' .. epoch
end

-- After a run ended its keys expire (shared/runs/retention.py); a set a late write recreates (a release
-- after the end) must expire with the task it belongs to, not live forever.
local function inherit_ttl(key, task_key)
  local ttl = redis.call('PTTL', task_key)
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end

-- KEYS[first..] as a list, for a variable-length tail of keys handed on to a helper. A loop,
-- not unpack(): unpack of a few thousand values overflows Lua's C stack.
local function keys_from(first)
  local keys = {}
  for i = first, #KEYS do keys[#keys + 1] = KEYS[i] end
  return keys
end
