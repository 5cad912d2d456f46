-- Enqueue a job that keeps a status record: the entry and its record in one step, so a
-- record exists exactly when the job was enqueued.
-- KEYS: stream, record, done list.
-- ARGV: task, body, job id, ttl ms, queue, priority, args (msgpack [args, kwargs]).
-- Returns the entry id.
fresh_record(KEYS[2], KEYS[3])
local id = redis.call('XADD', KEYS[1], '*', 'task', ARGV[1], 'body', ARGV[2], 'job', ARGV[3])
redis.call('HSET', KEYS[2], 'state', 'waiting', 'task', ARGV[1], 'queue', ARGV[5],
  'priority', ARGV[6], 'args', ARGV[7], 'enqueued_ms', now_ms(), 'entry', id)
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return id
