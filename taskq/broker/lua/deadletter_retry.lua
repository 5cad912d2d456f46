-- Re-enqueue a dead-lettered job: remove it from the dead-letter stream and add it to a job
-- stream in one step; a job that keeps a status record is waiting again (its failed
-- attempts stay in the record, its end and the done list go). A unique job (its end releases
-- a lock) takes its lock again, as an enqueue would: while any job holds the key, nothing
-- moves and the holder's id is returned.
-- KEYS: dead-letter stream, destination stream[, record, done list][, lock].
-- ARGV: dead entry id, task, body, job id, record ttl ms ('' if it keeps no record), lock
--       hold ms ('' if it is not unique).
-- Returns the new entry id, 0 if the dead entry is gone, or {'held', holder id}.
local recorded, lock = ARGV[5] ~= '', nil
if ARGV[6] ~= '' then lock = KEYS[#KEYS] end
if not redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1] then return 0 end
if lock then
  local holder = redis.call('GET', lock)
  if holder then return {'held', holder} end
end
redis.call('XDEL', KEYS[1], ARGV[1])
if lock then redis.call('SET', lock, ARGV[4], 'PX', ARGV[6]) end
if not recorded then
  return redis.call('XADD', KEYS[2], '*', 'task', ARGV[2], 'body', ARGV[3])
end
local id = redis.call('XADD', KEYS[2], '*', 'task', ARGV[2], 'body', ARGV[3], 'job', ARGV[4])
redis.call('HSET', KEYS[3], 'state', 'waiting', 'entry', id, 'task', ARGV[2])
redis.call('HDEL', KEYS[3], 'finished_ms', 'worker', 'started_ms')
if lock then redis.call('HSET', KEYS[3], 'unique', lock) end
redis.call('PEXPIRE', KEYS[3], ARGV[5])
redis.call('DEL', KEYS[4])
return id
