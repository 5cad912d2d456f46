-- Resume: end a pause (its field in the paused hash goes with the first call) and move the
-- jobs set aside under it back to their streams, oldest first, up to ARGV[2] per call (the
-- caller calls again while some are left, so a long pause's jobs do not hold Redis in one
-- step). Each goes back as a fresh entry of its priority's stream; its record, if any, says
-- 'waiting' with the new entry.
-- The first call also writes the resume's audit entry.
-- KEYS: paused hash, the pause's set, counts hash, streams high/normal/low, dead letters,
--       audit stream.
-- ARGV: pause field, most jobs moved by this call, then (first call) the audit stream's cap
--       and the audit entry's fields.
-- Returns how many are left in the set.
local most, cap = tonumber(ARGV[2]), tonumber(ARGV[3])
if not most or most < 1 then return redis.error_reply('ERR resume: bad count') end
if ARGV[3] and (not cap or cap < 1) then return redis.error_reply('ERR resume: bad cap') end
redis.call('HDEL', KEYS[1], ARGV[1])
if cap then redis.call('XADD', KEYS[8], 'MAXLEN', '~', cap, '*', unpack(ARGV, 4)) end
local moved = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, most - 1)) do
  local p = tonumber(string.sub(m, 1, 1))
  local nl = string.find(m, '\n', 3, true)
  if p and p >= 0 and p <= 2 and string.sub(m, 2, 2) == '\n' and nl then
    local task, body = string.sub(m, 3, nl - 1), string.sub(m, nl + 1)
    local fields, job = {'task', task, 'body', body}, body_job_id(body)
    if job then fields[5], fields[6] = 'job', job end
    local stream = KEYS[4 + p]
    local id = redis.call('XADD', stream, '*', unpack(fields))
    if job then
      local rec = record_key(stream, job)
      if redis.call('HSET', rec, 'state', 'waiting', 'entry', id) == 2 then
        redis.call('DEL', rec)  -- the record had expired
      else
        redis.call('HDEL', rec, 'held')
      end
    end
  else  -- not a member a worker wrote: dead-lettered with the reason, not dropped
    redis.call('XADD', KEYS[7], '*', 'task', '', 'job_id', '', 'body', m,
      'error_type', 'Rejected', 'error', 'malformed paused member', 'traceback', '',
      'attempts', 0, 'first_failure_ms', 0, 'last_failure_ms', 0, 'worker', '',
      'stream', KEYS[2], 'entry_id', '')
  end
  redis.call('ZREM', KEYS[2], m)
  moved = moved + 1
end
if moved > 0 then redis.call('HINCRBY', KEYS[3], 'held', -moved) end
return redis.call('ZCARD', KEYS[2])
