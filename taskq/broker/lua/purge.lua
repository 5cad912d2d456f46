-- Purge one job stream, in batches, up to a fixed newest id (jobs added since stay).
-- Waiting entries (after the group's last-delivered-id) are deleted. With include_pending,
-- entries in the group's pending list are also acked and deleted. Finished jobs still in the
-- stream are trimmed. No consumer is deleted.
-- KEYS: stream.  ARGV: group, end id (inclusive), batch, include_pending.
-- Returns {waiting entries removed, pending entries removed, 1 if nothing is left to remove}.
local group, last, batch = ARGV[1], ARGV[2], tonumber(ARGV[3])
-- No group yet: nothing was ever delivered, so every entry is waiting.
local cursor = last_delivered(KEYS[1], group) or '0-0'

local rows = redis.call('XRANGE', KEYS[1], '(' .. cursor, last, 'COUNT', batch)
if #rows > 0 then
  for _, e in ipairs(rows) do redis.call('XDEL', KEYS[1], e[1]) end
  return {#rows, 0, 0}
end
if ARGV[4] ~= '1' then
  trim_finished(KEYS[1], group)
  return {0, 0, 1}
end

local p = redis.pcall('XPENDING', KEYS[1], group, '-', last, batch)
if type(p) == 'table' and p.err then return {0, 0, 1} end
for _, e in ipairs(p) do
  redis.call('XACK', KEYS[1], group, e[1])
  redis.call('XDEL', KEYS[1], e[1])
end
if #p < batch then trim_finished(KEYS[1], group) end
return {0, #p, #p < batch and 1 or 0}
