-- Park a delayed job in the queue's schedule.
-- KEYS: schedule zset, due key.  ARGV: at_ms (absolute due time, or '' for "in_ms from now"),
-- in_ms, member ("<priority index>\n<task>\n<body>").
-- A countdown is relative to the Redis clock, so a producer's wrong clock cannot shift it;
-- an eta is an absolute time and is compared with the Redis clock as it is.
local due = tonumber(ARGV[1])
if not due then
  local delay = tonumber(ARGV[2])
  if not delay then return redis.error_reply('ERR schedule: give at_ms or in_ms') end
  due = now_ms() + delay
end
redis.call('ZADD', KEYS[1], due, ARGV[3])
lower_due(KEYS[2], due)
return due
