-- Purge one job stream, in batches, up to a fixed newest id (jobs added since stay).
-- Waiting entries (after the group's last-delivered-id) are deleted. With include_pending, entries
-- in the group's pending list are also acked and deleted, and their retry and failure records
-- dropped. The stream is never trimmed and no consumer is deleted.
-- KEYS: stream, retry zset, failures hash.  ARGV: group, end id (inclusive), batch, include_pending.
-- Returns {waiting entries removed, pending entries removed, 1 if nothing is left to remove}.
local group, last, batch = ARGV[1], ARGV[2], tonumber(ARGV[3])
local info = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if type(info) == 'table' and info.err then return {0, 0, 1} end
-- No group yet: nothing was ever delivered, so every entry is waiting.
local cursor = '0-0'
for _, g in ipairs(info) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  if f['name'] == group then cursor = f['last-delivered-id'] end
end

local rows = redis.call('XRANGE', KEYS[1], '(' .. cursor, last, 'COUNT', batch)
if #rows > 0 then
  local ids = {}
  for i, e in ipairs(rows) do ids[i] = e[1] end
  redis.call('XDEL', KEYS[1], unpack(ids))
  return {#ids, 0, 0}
end
if ARGV[4] ~= '1' then return {0, 0, 1} end

local p = redis.pcall('XPENDING', KEYS[1], group, '-', last, batch)
if type(p) == 'table' and p.err then return {0, 0, 1} end
for _, e in ipairs(p) do
  redis.call('XACK', KEYS[1], group, e[1])
  redis.call('XDEL', KEYS[1], e[1])
  redis.call('ZREM', KEYS[2], e[1])
  redis.call('HDEL', KEYS[3], KEYS[1] .. ' ' .. e[1])
end
return {0, #p, #p < batch and 1 or 0}
