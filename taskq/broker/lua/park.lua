-- A failed job waits out its backoff in the pending list, owned by the retry pseudo-consumer.
-- KEYS: stream, retry zset, failures hash.
-- ARGV: group, entry id, owner, retry consumer, delay_ms (due that long after now, Redis clock).
-- Returns 1, or 0 if the entry is no longer pending under `owner` (someone else took it).
local delay = tonumber(ARGV[5])
if not delay or delay < 0 or delay ~= delay then
  return redis.error_reply('ERR park: delay_ms must be a number >= 0')
end
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local now = now_ms()
-- JUSTID: the owner changes, the delivery count (= attempts so far) does not.
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[4], 0, ARGV[2], 'JUSTID')
redis.call('ZADD', KEYS[2], now + delay, ARGV[2])
redis.call('HSETNX', KEYS[3], KEYS[1] .. ' ' .. ARGV[2], now)
return 1
