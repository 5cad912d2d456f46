-- A failed job waits out its backoff in the retry set of its stream, out of the stream: the
-- entry is acked and deleted, and the job comes back as a fresh entry when due (promote.lua).
-- Its body, patched by the caller, carries the attempts used so far.
-- KEYS: stream, retry zset, due key[, record], then every key the ops touch.
-- ARGV: group, entry id, owner, delay_ms (after now, Redis clock), member
--       ("<priority>\n<task>\n<body>"), first failure ms ('' for now), ops (msgpack, or ''),
--       '1' if there is a record, then for a record: ttl ms, attempt, error type, error,
--       traceback.
-- Returns 1, or 0 if the entry is no longer pending under `owner` (someone else took it).
local delay = tonumber(ARGV[4])
if not delay or delay < 0 or delay ~= delay then
  return redis.error_reply('ERR park: delay_ms must be a number >= 0')
end
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local now = now_ms()
local first = ARGV[6] ~= '' and ARGV[6] or tostring(now)
redis.call('ZADD', KEYS[2], now + delay, first .. '\n' .. ARGV[5])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
lower_due(KEYS[3], now + delay)
if ARGV[8] == '1' then
  redis.call('HSET', KEYS[4], 'state', 'retrying', 'due_ms', now + delay, 'attempts', ARGV[10])
  record_attempt(KEYS[4], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[3], now)
  redis.call('PEXPIRE', KEYS[4], delay + tonumber(ARGV[9]))
end
if ARGV[7] ~= '' then run_ops(cmsgpack.unpack(ARGV[7]), now) end
return 1
