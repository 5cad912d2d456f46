-- Take a running slot for a job of a concurrency-limited task, or make it wait for one, in
-- one step. `running` holds at most N members "<worker id>|<job id>"; slots of workers that
-- stopped beating are dropped first (a worker's crash frees them within its heartbeat TTL;
-- its jobs come back through the sweep). A job with no free slot leaves its stream for the
-- `held` set (in arrival order, no attempt used) until a slot's release moves it back. The
-- queue's counts hash keeps how many jobs are held (for inspect: they are in no stream).
-- KEYS: running, held, stream, the queue's workers zset[, record], then the queue's three
--       streams (where waiting jobs go back), then its counts hash.
-- ARGV: group, entry id, owner, N, member, held member ("<p>\n<task>\n<body>"), worker ttl
--       ms, queue, '1' if there is a record.
-- Returns 1 (run it now), 2 (waiting for a slot), or 0 (no longer this consumer's: a stale
-- delivery, e.g. of a batch its master handed back, takes no slot, since nothing would give
-- it back).
if not owned(KEYS[3], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local now = now_ms()
local running, held, n = KEYS[1], KEYS[2], tonumber(ARGV[4])
for _, m in ipairs(redis.call('ZRANGE', running, 0, -1)) do
  local worker = string.match(m, '^(.*)|[^|]*$')
  local beat = worker and redis.call('ZSCORE', KEYS[4], worker)
  if not beat or tonumber(beat) < now - tonumber(ARGV[7]) then redis.call('ZREM', running, m) end
end
if redis.call('ZSCORE', running, ARGV[5]) then return 1 end
if redis.call('ZCARD', running) < n then
  redis.call('ZADD', running, now, ARGV[5])
  refill(running, held, n, ARGV[8], 0, now)  -- slots freed above, for those waiting
  return 1
end
redis.call('ZADD', held, now, ARGV[6])
redis.call('HINCRBY', KEYS[#KEYS], 'held', 1)
redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[3], ARGV[2])
if ARGV[9] == '1' and redis.call('EXISTS', KEYS[5]) == 1 then  -- never a record without a TTL
  redis.call('HSET', KEYS[5], 'state', 'waiting', 'held', held)
  redis.call('HDEL', KEYS[5], 'worker', 'started_ms')
end
return 2
