-- summary: a board as a status read shows it, at one instant: tasks per status, the ids in
-- progress and the first failed or blocked ones in plan order, and chosen fields of the tasks
-- the call names (those a previous call returned), so a big board's status is a call or two
-- rather than a read of every task. It reads the counts and two small indexes (the running set
-- holds a task per busy member; of the unanswered zset only its first ARGV[1]), never the board.
-- KEYS[1] counts hash, KEYS[2] running set, KEYS[3] unanswered zset, KEYS[4..] task hashes.
-- ARGV[1] how many unanswered ids to return, ARGV[2..] the task fields to read.
-- Returns {flat HGETALL of the counts, running ids, how many are unanswered, the first
-- unanswered ids, then per task hash its fields' values (false for an absent field)}.
-- access: read
-- KEYS: counts_key, running_key, unanswered_key, task_keys...
-- ARGV: unanswered_limit, fields...
local counts_key, running_key, unanswered_key = KEYS[1], KEYS[2], KEYS[3]
local task_keys_from = 4  -- KEYS[task_keys_from..]
local unanswered_limit = ARGV[1]
local fields_from = 2  -- ARGV[fields_from..]
local fields = {}
for i = fields_from, #ARGV do fields[#fields + 1] = ARGV[i] end
local out = {
  redis.call('HGETALL', counts_key),
  redis.call('SMEMBERS', running_key),
  redis.call('ZCARD', unanswered_key),
  redis.call('ZRANGE', unanswered_key, 0, tonumber(unanswered_limit) - 1),
}
for i = task_keys_from, #KEYS do
  out[#out + 1] = redis.call('HMGET', KEYS[i], unpack(fields))
end
return out
