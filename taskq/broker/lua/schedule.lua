-- Park a delayed job in the queue's schedule (and create its status record, if it keeps one).
-- KEYS: schedule zset, due key[, record, done list].
-- ARGV: at_ms (absolute due time, or '' for "in_ms from now"), in_ms, member
--       ("<priority index>\n<task>\n<body>")[, ttl ms, task, queue, priority, args].
-- A countdown is relative to the Redis clock, so a producer's wrong clock cannot shift it;
-- an eta is an absolute time and is compared with the Redis clock as it is.
local now = now_ms()
local due = tonumber(ARGV[1])
if not due then
  local delay = tonumber(ARGV[2])
  if not delay then return redis.error_reply('ERR schedule: give at_ms or in_ms') end
  due = now + delay
end
redis.call('ZADD', KEYS[1], due, ARGV[3])
lower_due(KEYS[2], due)
if KEYS[3] then
  fresh_record(KEYS[3], KEYS[4])
  redis.call('HSET', KEYS[3], 'state', 'scheduled', 'task', ARGV[5], 'queue', ARGV[6],
    'priority', ARGV[7], 'args', ARGV[8], 'enqueued_ms', now, 'due_ms', due)
  redis.call('PEXPIRE', KEYS[3], math.max(0, due - now) + tonumber(ARGV[4]))
end
return due
