-- Shared prologue: stream ids, and deleting finished jobs by trimming.

-- A queue's priorities, as its streams are named ("<queue>:<priority>"; keys.py PRIORITIES).
local PRIORITY_NAMES = {'high', 'normal', 'low'}

local function id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return ms, seq
end

-- a < b for stream ids.
local function id_before(a, b)
  local am, as = id_parts(a)
  local bm, bs = id_parts(b)
  if #am ~= #bm then return #am < #bm end
  if am ~= bm then return am < bm end
  if #as ~= #bs then return #as < #bs end
  return as < bs
end

local function last_delivered(stream, group)
  local info = redis.pcall('XINFO', 'GROUPS', stream)
  if type(info) ~= 'table' or info.err then return nil end
  for _, g in ipairs(info) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == group then return last end
  end
  return nil
end

-- Delete the finished jobs at the head of a stream with one XTRIM. Every entry below the
-- group's last delivered id was delivered, and every entry below the oldest pending one was
-- acked, so MINID at the lower of the two removes finished jobs only, however the stream got
-- where it is. (Deleting entries one by one with XDEL costs Redis twenty times more.)
local function trim_finished(stream, group)
  local last = last_delivered(stream, group)
  if not last or last == '0-0' then return 0 end
  local ms, seq = id_parts(last)
  -- Just above the last delivered entry, so that it goes too once nothing is pending.
  local threshold = #seq < 15 and (ms .. '-' .. string.format('%d', tonumber(seq) + 1)) or last
  local p = redis.call('XPENDING', stream, group)
  if p[1] > 0 and id_before(p[2], threshold) then threshold = p[2] end
  return redis.call('XTRIM', stream, 'MINID', threshold)
end

-- Lower the queue's due key to `due` (ms) if it is later or absent.
local function lower_due(key, due)
  local current = tonumber(redis.call('GET', key))
  if not current or due < current then redis.call('SET', key, due) end
end
