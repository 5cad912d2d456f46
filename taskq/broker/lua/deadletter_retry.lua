-- Re-enqueue a dead-lettered job: remove it from the dead-letter stream and add it to a job
-- stream in one step.
-- KEYS: dead-letter stream, destination stream.  ARGV: dead entry id, task, body.
-- Returns the new entry id, or 0 if the dead entry is gone.
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
return redis.call('XADD', KEYS[2], '*', 'task', ARGV[2], 'body', ARGV[3])
