-- limits_paused: how long an account and a model stay paused (re-checked by a caller about to
-- call at the slot it waited for: a 429 meanwhile paused every caller of the account).
-- KEYS[1] the account hash, KEYS[2] the model's bucket hash.
-- Returns the ms left of the later pause, 0 when neither is paused.
-- uses: core
-- access: write
-- KEYS: account_key, bucket_key
-- ARGV: none
local account_key, bucket_key = KEYS[1], KEYS[2]
local now = now_ms()
local until_ms = math.max(tonumber(redis.call('HGET', account_key, 'paused_until')) or 0,
                          tonumber(redis.call('HGET', bucket_key, 'paused_until')) or 0)
return math.max(0, math.floor(until_ms - now))
