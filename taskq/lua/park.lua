-- A failed job waits out its backoff in the pending list, owned by the retry pseudo-consumer.
-- KEYS: stream, retry zset, failures hash.  ARGV: group, entry id, owner, retry consumer, due_ms, now_ms.
-- Returns 1, or 0 if the entry is no longer pending under `owner` (someone else took it).
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
-- JUSTID: the owner changes, the delivery count (= attempts so far) does not.
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[4], 0, ARGV[2], 'JUSTID')
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[2])
redis.call('HSETNX', KEYS[3], KEYS[1] .. ' ' .. ARGV[2], ARGV[6])
return 1
