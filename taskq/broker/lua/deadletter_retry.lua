-- Re-enqueue a dead-lettered job: remove it from the dead-letter stream and add it to a job
-- stream in one step; a job that keeps a status record is waiting again (its failed
-- attempts stay in the record, its end and the done list go).
-- KEYS: dead-letter stream, destination stream[, record, done list].
-- ARGV: dead entry id, task, body[, job id, ttl ms].
-- Returns the new entry id, or 0 if the dead entry is gone.
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
if not KEYS[3] then
  return redis.call('XADD', KEYS[2], '*', 'task', ARGV[2], 'body', ARGV[3])
end
local id = redis.call('XADD', KEYS[2], '*', 'task', ARGV[2], 'body', ARGV[3], 'job', ARGV[4])
redis.call('HSET', KEYS[3], 'state', 'waiting', 'entry', id, 'task', ARGV[2])
redis.call('HDEL', KEYS[3], 'finished_ms', 'worker', 'started_ms')
redis.call('PEXPIRE', KEYS[3], ARGV[5])
redis.call('DEL', KEYS[4])
return id
