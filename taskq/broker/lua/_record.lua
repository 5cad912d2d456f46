-- Shared prologue: job status records (docs/protocol.md, "Status records"). A job that stores
-- its result has a hash <queue>:job:<id> and, once it ends, a one-element list
-- <queue>:done:<id> that waiters block on. Its stream entries carry its id in a 'job' field
-- (always the third field: task, body, job), so a script that reads an entry finds the
-- record without decoding the body; the record key it derives shares the stream's hash tag.

-- The job id of an entry's fields if the job keeps a record, else nil.
local function tracked_id(fields)
  if fields[5] == 'job' then return fields[6] end
  return nil
end

-- The record key of a job whose entry is (or was) in `stream` ("<queue>:<priority>").
local function record_key(stream, job_id)
  return string.match(stream, '^(.*):[^:]*$') .. ':job:' .. job_id
end

-- A worker took the job. A record that has expired is not brought back without a TTL: the
-- HSET then created all three fields, and the key goes again.
local function mark_running(rec, consumer, now)
  if redis.call('HSET', rec, 'state', 'running', 'worker', consumer, 'started_ms', now) == 3 then
    redis.call('DEL', rec)
  end
end

-- One failed attempt, kept as field 'attempt:<n>' (a msgpack map).
local function record_attempt(rec, n, error_type, error, traceback, worker, now)
  redis.call('HSET', rec, 'attempt:' .. n, cmsgpack.pack({
    error_type = error_type, error = error, traceback = traceback, worker = worker,
    finished_ms = now}))
end

-- End the job's record: the final state and its fields, the record's TTL, and the done list
-- that wakes every waiter. A record already final keeps its first outcome, so a job that ran
-- twice leaves one result. Returns 1 if this call ended it.
local function finish_record(rec, done, state, ttl, now, ...)
  local current = redis.call('HGET', rec, 'state')
  if current == 'succeeded' or current == 'failed' then return 0 end
  redis.call('HSET', rec, 'state', state, 'finished_ms', now, ...)
  redis.call('PEXPIRE', rec, ttl)
  redis.call('RPUSH', done, state)
  redis.call('PEXPIRE', done, ttl)
  return 1
end
