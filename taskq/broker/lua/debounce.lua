-- Enqueue a debounced job: the burst's one delayed job, its arguments replaced by the latest
-- and its start moved to min(now + debounce, first enqueue + max wait), in one step.
-- A burst is "<queue>:debounce:<key>", a hash {job, member, first, count}; its job waits in the
-- schedule as `member`. Once the member has left the schedule (the job was moved to its
-- stream, i.e. started), the next enqueue begins a new burst. The body is the producer's,
-- swapped whole (a signed body stays signed); its id must be the burst's job id, so a call
-- that does not know it is told it and sends its body again with it.
-- KEYS: burst, schedule, due key, record, done list, lock (KEYS[4..6] are the burst key
--       itself where absent: ARGV says which are there).
-- ARGV: job id, member, debounce ms, max wait ms, adopted ('1': the id is one this script
--       named), keeps a record ('1'), record ttl ms, task, queue, priority, args,
--       lock hold ms ('': no lock), lock released at the job's end ('1').
-- Returns {'ok', job id, due ms} (queued; 'held' instead of 'ok' with the lock's holder),
-- or {'adopt', id}: send the body again with this id ('' : with a fresh one).
local now = now_ms()
local id, member = ARGV[1], ARGV[2]
local debounce, max_wait = tonumber(ARGV[3]), tonumber(ARGV[4])
if not debounce or not max_wait or debounce < 1 or max_wait < debounce then
  return redis.error_reply('ERR debounce: bad times')
end
local recorded = ARGV[6] == '1'
local queue = string.match(KEYS[1], '^([^:]+):debounce:.')
if not queue or KEYS[2] ~= queue .. ':schedule' then
  return redis.error_reply('ERR debounce: keys of another queue')
end
local b = redis.call('HMGET', KEYS[1], 'job', 'member', 'first', 'count')
local waiting = b[1] and b[2] and redis.call('ZSCORE', KEYS[2], b[2])
local first = tonumber(b[3])
if waiting and first then
  if b[1] ~= id then return {'adopt', b[1]} end
  local due = math.min(now + debounce, first + max_wait)
  redis.call('ZREM', KEYS[2], b[2])
  redis.call('ZADD', KEYS[2], due, member)
  lower_due(KEYS[3], due)
  redis.call('HSET', KEYS[1], 'member', member, 'count', (tonumber(b[4]) or 1) + 1)
  redis.call('PEXPIRE', KEYS[1], due - now + max_wait)
  note_gathering(queue, KEYS[1], due, now)
  if recorded then
    redis.call('HSET', KEYS[4], 'args', ARGV[11], 'priority', ARGV[10], 'due_ms', due)
    redis.call('PEXPIRE', KEYS[4], due - now + tonumber(ARGV[7]))
  end
  return {'ok', id, due}
end
if ARGV[5] == '1' then return {'adopt', ''} end  -- that burst's job started: a new one
if ARGV[12] ~= '' then
  local held = redis.call('GET', KEYS[6])
  if held then return {'held', held, 0} end
  redis.call('SET', KEYS[6], id, 'PX', ARGV[12])
end
local due = now + debounce
redis.call('ZADD', KEYS[2], due, member)
lower_due(KEYS[3], due)
redis.call('HSET', KEYS[1], 'job', id, 'member', member, 'first', now, 'count', 1)
redis.call('PEXPIRE', KEYS[1], debounce + max_wait)
note_gathering(queue, KEYS[1], due, now)
if recorded then
  fresh_record(KEYS[4], KEYS[5])
  redis.call('HSET', KEYS[4], 'state', 'scheduled', 'task', ARGV[8], 'queue', ARGV[9],
    'priority', ARGV[10], 'args', ARGV[11], 'enqueued_ms', now, 'due_ms', due)
  if ARGV[12] ~= '' and ARGV[13] == '1' then redis.call('HSET', KEYS[4], 'unique', KEYS[6]) end
  redis.call('PEXPIRE', KEYS[4], debounce + tonumber(ARGV[7]))
end
return {'ok', id, due}
