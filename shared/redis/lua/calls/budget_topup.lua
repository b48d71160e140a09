-- budget_topup: raise a run's or a team's budget (`teamctl budget --add-tokens/--add-usd`) and
-- clear the recorded reason it was spent, in one step, so every caller looks again (a limit
-- still passed is found again from the totals; a call still not covered is marked again).
-- KEYS[1] the usage hash (added_tokens and added_usd are added to max_tokens and max_cost_usd
-- by budget_charge.lua, Budget.exceeded and the call reservation).
-- ARGV[1] tokens to add (an integer >= 0), ARGV[2] dollars to add (>= 0).
-- Returns {added tokens in all, added dollars in all as a string}.
-- access: write
-- KEYS: usage_key
-- ARGV: add_tokens, add_usd
local usage_key = KEYS[1]
local add_tokens, add_usd = ARGV[1], ARGV[2]
local tokens = redis.call('HINCRBY', usage_key, 'added_tokens', add_tokens)
local usd = redis.call('HINCRBYFLOAT', usage_key, 'added_usd', add_usd)
redis.call('HDEL', usage_key, 'budget_exceeded')
return {tokens, tostring(usd)}
