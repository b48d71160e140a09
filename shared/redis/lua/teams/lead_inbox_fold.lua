-- lead_inbox_fold: keep a team lead's unread mail within its bound by folding the oldest unread
-- notices (system types, to the lead) into one summary notice; peer and protocol messages are
-- never folded. A folded notice leaves the lead's inbox and the bus in this step, so it can never
-- be delivered afterwards; nothing the lead's model has seen (up to the record's `seen`, raised
-- by the lead's peeks) or read (up to its offset) is folded, so nothing is both delivered and
-- folded. The summary still unseen is absorbed into the next one: one open summary at a time.
-- Bounded work: it counts only the inbox entries added since its last count (all unread ones
-- once the lead read since), and counts and walks at most ARGV[3] entries each.
-- KEYS[1] bus stream, KEYS[2] bus sequence counter, KEYS[3] the lead's inbox stream,
-- KEYS[4] read offsets hash, KEYS[5] the lead inbox record (hash: mark, unread, counted_from,
-- seen, kept_to, summary_id, summary).
-- ARGV[1] most unread messages (lead_inbox_max_messages), ARGV[2] unread messages a fold goes
-- down to, ARGV[3] most inbox entries counted and most walked, ARGV[4] most notices folded,
-- ARGV[5] the summary's type, ARGV[6] most teammates and tasks a summary names, ARGV[7] room to
-- make (1: fold already at the bound, for a message about to be sent; else 0), ARGV[8..] the
-- prefixes of the foldable (system) types.
-- Returns {unread (counted up to the record's mark), notices folded, bus length, 1 when the
-- count or the fold hit its batch and the caller should call again, else 0}.
-- uses: core, messages, streams
-- access: upkeep
-- KEYS: bus_key, bus_seq_key, inbox_key, offsets_key, record_key
-- ARGV: max_unread, fold_to, walk_max, notices_max, summary_type, names_max, room,
--   system_prefixes...
local bus_key, bus_seq_key, inbox_key, offsets_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local record_key = KEYS[5]
local max_unread, fold_to, walk_max, notices_max = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local summary_type, names_max, room = ARGV[5], ARGV[6], ARGV[7]
local system_prefixes_from = 8  -- ARGV[system_prefixes_from..]
local max_unread, target = tonumber(max_unread), tonumber(fold_to)
local walk_cap, fold_cap, names_cap = tonumber(walk_max), tonumber(notices_max), tonumber(names_max)
local fold_above = max_unread - tonumber(room)
local offset = redis.call('HGET', offsets_key, 'lead') or '0-0'
local r = redis.call('HMGET', record_key, 'mark', 'unread', 'counted_from', 'seen', 'kept_to',
  'summary_id', 'summary')

-- Count: unread = inbox entries in (offset, mark]. While the lead has not read since the last
-- count only the entries added since are counted; otherwise all unread ones again.
local from, unread = offset, 0
if r[1] and r[3] == offset then from, unread = r[1], tonumber(r[2]) end
-- Counting past the bound by a full batch tells all a fold needs: no more (but a batch, for
-- what lies past kept mail), and at most walk_max entries a call (a long count goes on in the
-- caller's next call, from the mark).
local limit = math.min(walk_cap, math.max(fold_cap, fold_above + fold_cap + 1 - unread))
local refs = redis.call('XRANGE', inbox_key, '(' .. from, '+', 'COUNT', limit)
unread = unread + #refs
local mark = from
if #refs > 0 then mark = refs[#refs][1] end
local counted_all = #refs < limit

local function save(extra)
  redis.call('HSET', record_key, 'mark', mark, 'unread', unread, 'counted_from', offset,
    unpack(extra or {}))
end
if unread <= fold_above then
  save()
  local counting = 0
  if not counted_all then counting = 1 end
  return {unread, 0, redis.call('XLEN', bus_key), counting}
end

local seen = stream_id_max(offset, r[4] or '0-0')
local summary_id = r[6] or ''
local summary = {count = 0, types = {}, mates = {}, mates_more = 0, tasks = {}, tasks_more = 0}
if summary_id ~= '' and stream_id_after(summary_id, seen) then
  summary = cjson.decode(r[7])
else
  summary_id = ''
end

local function foldable(fields)
  if fields.to ~= 'lead' or fields.type == summary_type then return false end
  for i = system_prefixes_from, #ARGV do
    if string.sub(fields.type or '', 1, #ARGV[i]) == ARGV[i] then return true end
  end
  return false
end

local function tally(list, key)
  for _, item in ipairs(list) do
    if item[1] == key then item[2] = item[2] + 1 return true end
  end
  return false
end

-- Count `key` in a summary's list of names, which names at most names_max (the rest counted in
-- summary[more]).
local function name(list, more, key)
  if tally(list, key) then return end
  if #list < names_cap then
    list[#list + 1] = {key, 1}
  else
    summary[more] = summary[more] + 1
  end
end

local function note(fields)
  summary.count = summary.count + 1
  if not tally(summary.types, fields.type) then
    summary.types[#summary.types + 1] = {fields.type, 1}
  end
  local mate = fields.from
  if mate == 'system' and string.sub(fields.type, 1, 9) == 'teammate.' then
    mate = string.match(fields.content or '', '^([a-z0-9_-]+) ')  -- "<name> is idle ..."
  elseif mate == 'system' then
    mate = nil
  end
  if mate then name(summary.mates, 'mates_more', mate) end
  local tid = fields.task_id or ''
  if tid ~= '' then name(summary.tasks, 'tasks_more', tid) end
end

-- Fold the oldest foldable notices after what the lead has seen, up to the counted mark; the
-- new summary adds one message and absorbing the open one removes one.
local counted_summary = summary_id ~= '' and not stream_id_after(summary_id, mark)
local want = unread + 1 - target
if counted_summary then want = want - 1 end
want = math.min(want, fold_cap)
local start = stream_id_max(seen, r[5] or '0-0')
local kept_to = r[5] or '0-0'
local folded = 0
local walked = {}
if stream_id_after(mark, start) then
  walked = redis.call('XRANGE', inbox_key, '(' .. start, mark, 'COUNT', walk_cap)
end
for _, ref in ipairs(walked) do
  local id = ref[1]
  if id == summary_id then
    kept_to = id
  else
    local entry = redis.call('XRANGE', bus_key, id, id)
    if #entry == 0 then  -- its message left the bus (deleted by hand): nothing to deliver
      redis.call('XDEL', inbox_key, id)
      unread = unread - 1
    else
      local fields = entry_fields(entry[1][2])
      if not foldable(fields) then
        kept_to = id  -- everything before it is kept or folded: no walk needs it again
      elseif folded < want then
        note(fields)
        redis.call('XDEL', inbox_key, id)
        redis.call('XDEL', bus_key, id)
        folded = folded + 1
        unread = unread - 1
      else
        break
      end
    end
  end
end
-- A walk that stopped at its cap (a run of kept messages) goes on in the caller's next call.
local more = 0
if not counted_all or (unread > fold_above and (folded >= fold_cap or #walked >= walk_cap)) then
  more = 1
end
if folded == 0 then
  save({'kept_to', kept_to})
  return {unread, 0, redis.call('XLEN', bus_key), more}
end

if summary_id ~= '' then
  redis.call('XDEL', inbox_key, summary_id)
  redis.call('XDEL', bus_key, summary_id)
  if counted_summary then unread = unread - 1 end
end

local function listed(list, more)
  local parts = {}
  for _, item in ipairs(list) do parts[#parts + 1] = item[1] .. ' ' .. item[2] end
  local text = table.concat(parts, ', ')
  if more > 0 then text = text .. ' and ' .. more .. ' more' end
  return text
end
local text = summary.count .. ' older notices were folded into this one to keep your unread '
  .. 'mail within lead_inbox_max_messages (' .. max_unread .. '): ' .. listed(summary.types, 0)
  .. '.'
if #summary.mates > 0 then
  text = text .. ' Teammates: ' .. listed(summary.mates, summary.mates_more) .. '.'
end
if #summary.tasks > 0 then
  text = text .. ' Tasks: ' .. listed(summary.tasks, summary.tasks_more) .. '.'
end
text = text .. ' See list_tasks, get_task and list_teammates for where things stand now.'
local new_id = publish_message(bus_key, bus_seq_key, {inbox_key}, 'system', 'lead', summary_type,
  '', text,
  now_ms())
if counted_all then
  mark = new_id
  unread = unread + 1
end
save({'kept_to', kept_to, 'summary_id', new_id, 'summary', cjson.encode(summary)})
if unread <= fold_above then more = 0 end
if not counted_all then more = 1 end  -- mail past the mark is not counted yet
return {unread, folded, redis.call('XLEN', bus_key), more}
