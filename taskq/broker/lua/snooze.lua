-- A job that snoozed (taskq.Snooze) waits in the queue's schedule like a delayed job, out of
-- its stream: the entry is acked and deleted, and the job comes back as a fresh entry when
-- due (promote.lua). Its body, patched by the caller, keeps the attempts used (a snooze
-- spends none) and counts the snoozes. Its record says 'snoozed' with the due time.
-- KEYS: stream, schedule zset, due key[, record], then every key the ops touch.
-- ARGV: group, entry id, owner, delay_ms (after now, Redis clock), member
--       ("<priority>\n<task>\n<body>"), ops (msgpack, or ''), record ttl ms ('' if no record).
-- Returns 1, or 0 if the entry is no longer pending under `owner` (someone else took it).
local delay = tonumber(ARGV[4])
if not delay or delay < 0 or delay ~= delay then
  return redis.error_reply('ERR snooze: delay_ms must be a number >= 0')
end
local ttl = ARGV[7] ~= '' and tonumber(ARGV[7]) or nil
if ARGV[7] ~= '' and not ttl then return redis.error_reply('ERR snooze: bad ttl') end
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local now = now_ms()
redis.call('ZADD', KEYS[2], now + delay, ARGV[5])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
lower_due(KEYS[3], now + delay)
if ttl then
  if redis.call('HSET', KEYS[4], 'state', 'snoozed', 'due_ms', now + delay) == 2 then
    redis.call('DEL', KEYS[4])  -- the record had expired
  else
    redis.call('HDEL', KEYS[4], 'worker', 'started_ms')
    redis.call('PEXPIRE', KEYS[4], delay + ttl)
  end
end
if ARGV[6] ~= '' then run_ops(cmsgpack.unpack(ARGV[6]), now) end
return 1
