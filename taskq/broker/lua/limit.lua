-- Admit a job of a rate-limited task, or defer it, in one step. The limit is a sliding
-- window: at most N starts in any W ms, kept as a sorted set of start slots (member: job id
-- and attempt, score: the slot's time), handed out in order and at least W/N apart, so a
-- backlog starts evenly rather than in bursts of N. A job over the limit gets
-- the first free slot in the future and waits for it in the schedule, out of its stream (so
-- it blocks nobody behind it), without using an attempt; back at its time, it holds its slot.
-- KEYS: the limit's sorted set, stream, schedule, due key[, record].
-- ARGV: group, entry id, owner, N, W ms, slot member, schedule member, record ttl ms.
-- Returns 1 (run it now), 2 (deferred), or 0 (the entry is no longer this consumer's).
local now = now_ms()
local key, n, window = KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local held = redis.call('ZSCORE', key, ARGV[6])
if held then return 1 end  -- deferred earlier: back at (or after) its slot
local slot = now
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] then slot = math.max(slot, tonumber(last[2]) + window / n) end
if redis.call('ZCARD', key) >= n then
  local nth = redis.call('ZRANGE', key, -n, -n, 'WITHSCORES')
  slot = math.max(slot, tonumber(nth[2]) + window)
end
if slot > now and not owned(KEYS[2], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('ZADD', key, slot, ARGV[6])
redis.call('PEXPIRE', key, slot - now + window)
if slot <= now then return 1 end
redis.call('ZADD', KEYS[3], slot, ARGV[7])
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
lower_due(KEYS[4], slot)
if KEYS[5] then
  redis.call('HSET', KEYS[5], 'state', 'scheduled', 'due_ms', slot)
  redis.call('HDEL', KEYS[5], 'worker', 'started_ms')
  redis.call('PEXPIRE', KEYS[5], slot - now + tonumber(ARGV[8]))
end
return 2
