-- streams: stream ids compared as numbers, and entries read as tables (lead_inbox_fold.lua,
-- team_bus_compact.lua, team_peek.lua).

-- Stream ids ('<ms>-<seq>') compare by their two numbers, not as strings ('10-0' > '9-0').
local function stream_id_after(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  a_ms, b_ms = tonumber(a_ms), tonumber(b_ms)
  return a_ms > b_ms or (a_ms == b_ms and tonumber(a_seq) > tonumber(b_seq))
end

-- The later of two stream ids.
local function stream_id_max(a, b)
  if stream_id_after(a, b) then return a end
  return b
end

-- A stream entry's flat field list ({k1, v1, k2, v2, ...}) as a table.
local function entry_fields(flat)
  local fields = {}
  for i = 1, #flat, 2 do fields[flat[i]] = flat[i + 1] end
  return fields
end
