-- create_page: write one page of a big plan's task hashes, their readiness settled by the caller
-- (as create.lua settles it), before create_commit makes the board: until then no reader sees
-- them (readers start from the order list), and a plan written in pages never blocks Redis for
-- as long as one call over every task would.
-- KEYS[1] order list, KEYS[2..] the page's task hashes.
-- ARGV[i] (i = 1..#page): the task as JSON {fields: {name: value}, status}, status one of
-- ready, pending, blocked (blocked tasks also get end_ms now, as create.lua's block does).
-- Returns how many hashes were written, or an error if the board already exists.
-- uses: core
-- access: write
-- KEYS: order_key, task_keys...
-- ARGV: tasks...
local order_key = KEYS[1]
local task_keys_from = 2  -- KEYS[task_keys_from..]
local tasks_from = 1  -- ARGV[tasks_from..]
if redis.call('EXISTS', order_key) == 1 then return redis.error_reply('board already exists') end
local now = now_ms()
for i = tasks_from, #ARGV do
  local t = cjson.decode(ARGV[i])
  local key = KEYS[1 + i]
  redis.call('DEL', key)  -- a page left by a create that stopped half way
  local flat = {}
  for name, value in pairs(t.fields) do
    flat[#flat + 1] = name
    flat[#flat + 1] = tostring(value)
  end
  redis.call('HSET', key, unpack(flat))
  redis.call('HSET', key, 'status', t.status, 'updated_ms', now)
  if t.status == 'blocked' then redis.call('HSET', key, 'end_ms', now) end
end
return #ARGV
