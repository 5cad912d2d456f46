-- Shared prologue: job status records (docs/protocol.md, "Status records"). A job that stores
-- its result has a hash <queue>:job:<id> and, once it ends, a one-element list
-- <queue>:done:<id> that waiters block on. Its stream entries carry its id in a 'job' field
-- (always the third field: task, body, job), so a script that reads an entry finds the
-- record without decoding the body; the record key it derives shares the stream's hash tag.

-- The queue of a stream ("<queue>:<priority>").
local function queue_of(stream)
  return string.match(stream, '^(.*):[^:]*$')
end

-- The record and done list of job `job_id` of `queue`.
local function job_keys(queue, job_id)
  return queue .. ':job:' .. job_id, queue .. ':done:' .. job_id
end

-- The record key of a job whose entry is (or was) in `stream`.
local function record_key(stream, job_id)
  return (job_keys(queue_of(stream), job_id))
end

-- Its done list.
local function done_key(stream, job_id)
  local _, done = job_keys(queue_of(stream), job_id)
  return done
end

-- A delayed job's body in the schedule follows its fairness key when it has one (a fair
-- queue's, docs/fairness.md): '\193fair\n<key>\n<body>' (0xc1 starts no msgpack body).
-- Returns the key (nil if none) and the body (nil if no key line follows the head).
local FAIR_HEAD = '\193fair\n'
local function fair_head(body)
  if string.byte(body, 1) ~= 193 or string.sub(body, 1, #FAIR_HEAD) ~= FAIR_HEAD then
    return nil, body
  end
  local nl = string.find(body, '\n', #FAIR_HEAD + 1, true)
  if not nl then return nil, nil end
  return string.sub(body, #FAIR_HEAD + 1, nl - 1), string.sub(body, nl + 1)
end

-- The job id in a body (after its fairness key, in a schedule member), if the job keeps a
-- record (else nil). A body with bin fields is one Lua's msgpack cannot decode: its id is
-- then found by its bytes.
local function body_job_id(body)
  body = select(2, fair_head(body)) or ''
  if not string.find(body, 'result_ttl_s', 1, true) then return nil end
  local ok, m = pcall(cmsgpack.unpack, body)
  if ok and type(m) == 'table' then
    return (m.result_ttl_s and type(m.id) == 'string') and m.id or nil
  end
  local at = string.find(body, '\162id', 1, true)
  if not at then return nil end
  local h = string.byte(body, at + 3)
  if h and h >= 0xa0 and h <= 0xbf then return string.sub(body, at + 4, at + 3 + h - 0xa0) end
  if h == 0xd9 then
    local n = string.byte(body, at + 4)
    return string.sub(body, at + 5, at + 4 + n)
  end
  return nil
end

-- One failed attempt, kept as field 'attempt:<n>' (a msgpack map).
local function record_attempt(rec, n, error_type, error, traceback, worker, now)
  redis.call('HSET', rec, 'attempt:' .. n, cmsgpack.pack({
    error_type = error_type, error = error, traceback = traceback, worker = worker,
    finished_ms = now}))
end

local FINAL_STATES = {succeeded = true, failed = true, cancelled = true, expired = true}

-- A job with a caller-chosen id enqueued again after the last one with that id ended starts
-- a record of its own: the ended record and its done list go, so the new job shows none of
-- the old one's attempts, errors or result, and its waiters do not wake on the old end.
local function fresh_record(rec, done)
  if FINAL_STATES[redis.call('HGET', rec, 'state')] then redis.call('DEL', rec, done) end
end

-- End the job's record: the final state and its fields, the record's TTL, and, if a waiter
-- registered (watch.lua), the done list that wakes every waiter (most jobs have none: their
-- end writes no list). A record already final keeps its first outcome, so a job that ran
-- twice leaves one result. Returns 1 if this call ended it.
local FINAL = FINAL_STATES
local function finish_record(rec, done, state, ttl, now, ...)
  local was = redis.call('HMGET', rec, 'state', 'waited')
  if FINAL[was[1]] then return 0 end
  redis.call('HSET', rec, 'state', state, 'finished_ms', now, ...)
  redis.call('PEXPIRE', rec, ttl)
  if was[2] then
    redis.call('RPUSH', done, state)
    redis.call('PEXPIRE', done, ttl)
  end
  return 1
end
