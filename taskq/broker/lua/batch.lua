-- Enqueue one call of a batching task: it joins its key's batch (a list of
-- "<call id>\n<body>", in enqueue order); the batch runs as one job when it holds
-- `size` calls (flushed here) or `wait` ms after its first call (its marker in the schedule,
-- flushed by promote.lua). The batch job's id is its first call's id.
-- A call that joins a batch someone else began, of a task that keeps a record, leaves a
-- pointer to the batch job (its id), with the batch record's first TTL, so that its own id
-- finds the batch.
-- KEYS: batch list, schedule, due key, this call's pointer (Q:batchcall:<call id>).
-- ARGV: call id, body, size, wait ms, priority index, task, queue, priority, record ttl ms
--       (0: the task keeps no record), list ttl ms.
-- Returns {batch job id, calls in the batch, due ms, 1 if this call flushed it}.
local size, wait, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[10])
local p, rec_ttl = tonumber(ARGV[5]), tonumber(ARGV[9])
if not (size and size >= 1 and wait and wait >= 1 and ttl and ttl >= 1 and p and p >= 0
    and p <= 2 and rec_ttl) or string.find(ARGV[1], '\n', 1, true) then
  return redis.error_reply('ERR batch: bad arguments')
end
local queue = string.match(KEYS[1], '^([^:]+):batch:.')
if not queue or KEYS[2] ~= queue .. ':schedule'
    or KEYS[4] ~= queue .. ':batchcall:' .. ARGV[1] then
  return redis.error_reply('ERR batch: keys of another queue')
end
local now = now_ms()
local n = redis.call('RPUSH', KEYS[1], ARGV[1] .. '\n' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ttl)
local first = n == 1 and ARGV[1] or string.match(redis.call('LINDEX', KEYS[1], 0), '^([^\n]*)\n')
local marker = batch_marker(KEYS[1], p, ARGV[6])
local rec = queue .. ':job:' .. first
local due = now + wait
if n == 1 then
  redis.call('ZADD', KEYS[2], due, marker)
  lower_due(KEYS[3], due)
  note_gathering(queue, KEYS[1], due, now)
  if rec_ttl > 0 then
    redis.call('HSET', rec, 'state', 'scheduled', 'task', ARGV[6], 'queue', ARGV[7],
      'priority', ARGV[8], 'enqueued_ms', now, 'due_ms', due, 'batch', 1)
    redis.call('PEXPIRE', rec, wait + rec_ttl)
  end
else
  due = tonumber(redis.call('ZSCORE', KEYS[2], marker)) or now
  if rec_ttl > 0 then
    redis.call('HSET', rec, 'batch', n)
    redis.call('SET', KEYS[4], first, 'PX', wait + rec_ttl)
  end
end
if n >= size then
  redis.call('ZREM', KEYS[2], marker)
  flush_batch(KEYS[1], queue .. ':' .. PRIORITY_NAMES[p + 1], ARGV[6])
  return {first, n, now, 1}
end
return {first, n, due, 0}
