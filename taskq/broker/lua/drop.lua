-- End a pending job that will not run (it expired before it started, or it was cancelled
-- while running): ack and delete it, count it, end its record in that state, and run the
-- workflow writes its end causes (later steps fail, its chord fails), all in one step.
-- KEYS: stream, the queue's counts hash[, record, done list], then every key the ops touch.
-- ARGV: group, entry id, owner, state ('expired' or 'cancelled'), ttl ms ('' if no record),
--       ops (msgpack, or ''), then for a job without a record: its id and how long its end
--       is kept (ms) in '<queue>:ended' for its status (its tombstone in '<queue>:cancelled',
--       if any, goes: both keys derived from the counts hash's name).
-- Returns 1, or 0 if the entry is no longer pending under `owner`.
local keep = ARGV[7] and tonumber(ARGV[8])
if ARGV[7] and (not keep or keep <= 0) then return redis.error_reply('ERR drop: bad keep ms') end
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local now = now_ms()
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HINCRBY', KEYS[2], ARGV[4], 1)
local ended = 1
if ARGV[5] ~= '' then
  ended = finish_record(KEYS[3], KEYS[4], ARGV[4], tonumber(ARGV[5]), now)
end
if ARGV[7] and ARGV[5] == '' then
  local prefix = string.sub(KEYS[2], 1, #KEYS[2] - 7)
  redis.call('HDEL', prefix .. ':cancelled', ARGV[7])
  local ended_key = prefix .. ':ended'
  redis.call('ZREMRANGEBYSCORE', ended_key, '-inf', now)
  redis.call('ZADD', ended_key, now + keep, string.format('%s:%s', ARGV[4], ARGV[7]))
  if redis.call('PTTL', ended_key) < keep then redis.call('PEXPIRE', ended_key, keep) end
end
if ended == 1 and ARGV[6] ~= '' then run_ops(cmsgpack.unpack(ARGV[6]), now) end
return 1
