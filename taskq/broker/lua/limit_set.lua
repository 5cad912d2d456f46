-- A limit set at run time (taskq limit set/clear): the task's (or one limit key's) entry in
-- the queue's limits hash, which workers read at least every half second and which
-- overrides the decorator's limits until cleared, and its audit entry, in one step.
-- KEYS: limits hash, audit stream.
-- ARGV: field ("<len(task)>:<task>:<key>"), value (JSON {"rate", "concurrency"}: the
--       given ones replace the stored ones; '' clears the entry), the audit stream's cap,
--       then the audit entry's fields.
-- Returns the entry now stored ('' once cleared).
local cap = tonumber(ARGV[3])
if not cap or cap < 1 then return redis.error_reply('ERR limit_set: bad audit cap') end
local out = ''
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  local ok, new = pcall(cjson.decode, ARGV[2])
  if not ok or type(new) ~= 'table' then return redis.error_reply('ERR limit_set: bad value') end
  local old = redis.call('HGET', KEYS[1], ARGV[1])
  local merged = {}
  if old then
    local fine, was = pcall(cjson.decode, old)
    if fine and type(was) == 'table' then merged = was end
  end
  for _, k in ipairs({'rate', 'concurrency'}) do
    if new[k] ~= nil and new[k] ~= cjson.null then merged[k] = new[k] end
  end
  out = cjson.encode(merged)
  redis.call('HSET', KEYS[1], ARGV[1], out)
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', cap, '*', unpack(ARGV, 4))
return out
