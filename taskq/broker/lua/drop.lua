-- End a pending job that will not run (it expired before it started, or it was cancelled
-- while running): ack and delete it, count it, end its record in that state, and run the
-- workflow writes its end causes (later steps fail, its chord fails), all in one step.
-- KEYS: stream, the queue's counts hash[, record, done list], then every key the ops touch.
-- ARGV: group, entry id, owner, state ('expired' or 'cancelled'), ttl ms ('' if no record),
--       ops (msgpack, or '').
-- Returns 1, or 0 if the entry is no longer pending under `owner`.
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local now = now_ms()
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HINCRBY', KEYS[2], ARGV[4], 1)
local ended = 1
if ARGV[5] ~= '' then
  ended = finish_record(KEYS[3], KEYS[4], ARGV[4], tonumber(ARGV[5]), now)
end
if ended == 1 and ARGV[6] ~= '' then run_ops(cmsgpack.unpack(ARGV[6]), now) end
return 1
