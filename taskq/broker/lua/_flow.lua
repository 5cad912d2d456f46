-- Shared prologue: the writes that start and end workflow steps ("ops", built by
-- taskq/flow.py and passed as one msgpack list). Each op is a list whose first element
-- names it; every key an op names is also declared in KEYS by the caller.

-- A msgpack array header for n elements.
local function array_header(n)
  if n < 16 then return string.char(0x90 + n) end
  if n < 65536 then return string.char(0xdc, math.floor(n / 256), n % 256) end
  return string.char(0xdd, math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end

local run_ops

-- Concurrency limits: move jobs waiting for a slot of `running` (at most `n` members) from
-- `held` back into their streams (`prefix` .. ':' .. priority), while slots are free, and
-- count them out of the queue's held jobs. `taken` slots are about to be used by the caller.
-- A moved job's record notes the slot kept free for it ('slot_for': "<n>|<held key>"), so
-- that a cancel before it takes the slot passes the slot on (cancel.lua).
local function refill(running, held, n, prefix, taken, now)
  local free = n - redis.call('ZCARD', running) - taken
  while free > 0 do
    local top = redis.call('ZPOPMIN', held)
    if not top[1] then return end
    local m = top[1]
    redis.call('HINCRBY', prefix .. ':counts', 'held', -1)
    local p, nl = tonumber(string.sub(m, 1, 1)), string.find(m, '\n', 3, true)
    if p and nl then
      local task, body = string.sub(m, 3, nl - 1), string.sub(m, nl + 1)
      local fields, job = {'task', task, 'body', body}, body_job_id(body)
      if job then fields[5], fields[6] = 'job', job end
      local stream = prefix .. ':' .. PRIORITY_NAMES[p + 1]
      local id = redis.call('XADD', stream, '*', unpack(fields))
      if job then
        local rec = prefix .. ':job:' .. job
        if redis.call('EXISTS', rec) == 1 then
          redis.call('HSET', rec, 'entry', id, 'slot_for', n .. '|' .. held)
          redis.call('HDEL', rec, 'held')
        end
      end
      free = free - 1
    end
  end
end

-- The follow-up of a keep_last lock ("<queue>:unique:<key>") whose job `ended` just ended,
-- if one is stored for it at "<queue>:keeplast:<key>" ("<job it follows>\n<id>\n<hold ms>\n
-- <p>\n<task>\n<body>", written by keeplast.lua): it takes the lock and enters its stream,
-- its record waiting. (A follow-up of another job is stale: the next store replaces it.)
local function enqueue_follow_up(lock, ended, now)
  local queue, key = string.match(lock, '^([^:]+):unique:(.+)$')
  if not queue then return end
  local stored = redis.call('GET', queue .. ':keeplast:' .. key)
  if not stored then return end
  local follows, id, hold, p, task, body =
    string.match(stored, '^([^\n]*)\n([^\n]+)\n(%d+)\n([012])\n([^\n]+)\n(.*)$')
  if follows ~= ended then return end
  redis.call('DEL', queue .. ':keeplast:' .. key)
  redis.call('SET', lock, id, 'PX', hold)
  local entry = redis.call('XADD', queue .. ':' .. PRIORITY_NAMES[tonumber(p) + 1], '*',
    'task', task, 'body', body, 'job', id)
  local rec = queue .. ':job:' .. id
  if redis.call('HSET', rec, 'state', 'waiting', 'entry', entry, 'enqueued_ms', now) == 3 then
    redis.call('DEL', rec)  -- the record had expired
  end
end

-- Batches of a batching task (batch.lua): a list "<queue>:batch:<task>:<key>" of
-- "<call id>\n<body>", waiting as a marker member in the schedule until it is due.
local BATCH_HEAD = '\193batch\n'
local function batch_marker(list, p, task)
  return p .. '\n' .. task .. '\n' .. BATCH_HEAD .. list
end

-- Note a debounce burst or a filling batch (`key`, of queue `queue`) in the queue's
-- gathering index (inspect, the dashboard), due at `due`; or drop it (`due` nil). Members
-- stale for a day go.
local GATHERING_TTL_MS = 8 * 86400000
local function note_gathering(queue, key, due, now)
  local index, member = queue .. ':gathering', string.sub(key, #queue + 2)
  if not due then
    redis.call('ZREM', index, member)
    return
  end
  redis.call('ZADD', index, due, member)
  redis.call('ZREMRANGEBYSCORE', index, '-inf', now - 86400000)
  redis.call('PEXPIRE', index, GATHERING_TTL_MS)
end

-- Run a batch as one job: every call of `list` leaves it, and one entry enters `stream`
-- whose body is 0xc1 and a msgpack array of the calls' bodies, each as its producer wrote
-- (and signed) it; its id is the first call's (its record, if it keeps one, says waiting).
-- Returns the entry id, or nil for an empty list.
local function flush_batch(list, stream, task)
  local n = redis.call('LLEN', list)
  if n == 0 then return nil end
  local items = redis.call('LPOP', list, n)
  local bodies, first = {}, nil
  for _, item in ipairs(items) do
    local nl = string.find(item, '\n', 1, true)
    if nl then
      first = first or string.sub(item, 1, nl - 1)
      bodies[#bodies + 1] = string.sub(item, nl + 1)
    end
  end
  if not first then return nil end
  local queue = string.match(list, '^([^:]+):batch:')
  note_gathering(queue, list, nil)
  local rec = queue .. ':job:' .. first
  local recorded = redis.call('EXISTS', rec) == 1
  local fields = {'task', task, 'body', '\193' .. cmsgpack.pack(bodies)}
  if recorded then fields[5], fields[6] = 'job', first end
  local id = redis.call('XADD', stream, '*', unpack(fields))
  if recorded then redis.call('HSET', rec, 'state', 'waiting', 'entry', id, 'batch', #bodies) end
  return id
end

-- A step cancelled before its turn (its record says so) does not start, and the steps after
-- it (`later`: {record, done, ttl ms} each) end as cancelled with it. Returns true if so.
local function cancelled_step(record, later, now)
  if record == '' or redis.call('HGET', record, 'state') ~= 'cancelled' then return false end
  for _, ref in ipairs(later or {}) do finish_record(ref[1], ref[2], 'cancelled', ref[3], now) end
  return true
end

-- ["job", stream, task, body, id, record, ttl ms, queue, priority, args, later, done[,
-- fairness key]]: a step enters its stream; its record (if it keeps one) says waiting, a
-- fresh one if a job with its id ended before (fresh_record). A job with a fairness key (a
-- unique or periodic job of a fair queue) is staged as fair_enqueue.lua stages it while its
-- queue is marked fair; a key that is not one is ignored (the job enters plain).
local function op_job(op, now)
  if cancelled_step(op[6], op[11], now) then return end
  if op[6] ~= '' and op[12] then fresh_record(op[6], op[12]) end
  local fields = {'task', op[3], 'body', op[4]}
  if op[6] ~= '' then fields[5], fields[6] = 'job', op[5] end
  local key = fair_key_ok(op[13]) and fair_on(op[2]) and op[13]
  local function write_record(id)
    if op[6] == '' then return end
    redis.call('HSET', op[6], 'state', 'waiting', 'task', op[3], 'queue', op[8],
      'priority', op[9], 'args', op[10], 'enqueued_ms', now, 'entry', id)
    if key then redis.call('HSET', op[6], 'fair_key', key) end
    if op[11] and #op[11] > 0 then redis.call('HSET', op[6], 'later', cmsgpack.pack(op[11])) end
    redis.call('PEXPIRE', op[6], op[7])
  end
  if key then
    fair_stage(op[2], fields, key, write_record)
  else
    write_record(redis.call('XADD', op[2], '*', unpack(fields)))
  end
end

-- ["schedule", schedule, due key, delay ms, member, record, ttl ms, task, queue, priority,
-- args, later, done]: a step with a countdown waits in the schedule.
local function op_schedule(op, now)
  if cancelled_step(op[6], op[12], now) then return end
  if op[6] ~= '' and op[13] then fresh_record(op[6], op[13]) end
  local due = now + op[4]
  redis.call('ZADD', op[2], due, op[5])
  lower_due(op[3], due)
  if op[6] ~= '' then
    redis.call('HSET', op[6], 'state', 'scheduled', 'task', op[8], 'queue', op[9],
      'priority', op[10], 'args', op[11], 'enqueued_ms', now, 'due_ms', due)
    if op[12] and #op[12] > 0 then redis.call('HSET', op[6], 'later', cmsgpack.pack(op[12])) end
    redis.call('PEXPIRE', op[6], op[4] + op[7])
  end
end

-- A positive whole number that Lua holds exactly (what a count or a TTL must be).
local function whole(x)
  return type(x) == 'number' and x >= 1 and x == math.floor(x) and x < 2 ^ 53
end

-- Whether `ref` is {record, done, ttl ms} of one job: '<queue>:job:<id>' and its done list.
local function record_ref(ref)
  if type(ref) ~= 'table' or type(ref[1]) ~= 'string' then return false end
  local queue, id = string.match(ref[1], '^([^:]+):job:(.+)$')
  return queue ~= nil and ref[2] == queue .. ':done:' .. id and whole(ref[3])
end

-- Whether `job` is the op of a chord body that enqueues into the chord's own queue and
-- names only that job's own keys (the chord's state lives in Redis, where whoever may write
-- the queue could change it: nothing in it is run as given).
local PRIORITY_INDEX = {high = 0, normal = 1, low = 2}
local function chord_body_op(job, key)
  local queue = string.match(key, '^([^:]+):chord:')
  if type(job) ~= 'table' or job[1] ~= 'job' or not queue then return false end
  local id, record, priority = job[5], job[6], job[9]
  if type(id) ~= 'string' or id == '' or not PRIORITY_INDEX[priority] then return false end
  if job[2] ~= queue .. ':' .. priority or job[8] ~= queue or type(job[3]) ~= 'string' then
    return false
  end
  if record ~= '' and (record ~= queue .. ':job:' .. id or not whole(job[7])) then
    return false
  end
  if type(job[10]) ~= 'string' or (job[11] ~= nil and type(job[11]) ~= 'table') then
    return false
  end
  for _, ref in ipairs(job[11] or {}) do
    if not record_ref(ref) then return false end
  end
  return true
end

-- A chord's state, checked before anything is written (scripts do not roll back): nil
-- unless every field is well formed, its digest is `digest` when the header's (signed)
-- body names one (SHA-1 of each field's length, ':' and text), and its body op passes
-- chord_body_op.
local function chord_state(key, index, digest)
  local c = redis.call('HMGET', key, 'n', 'ttl', 'pre', 'post', 'imm', 'op', 'done')
  for i = 1, 7 do
    if not c[i] then return nil end
  end
  if digest then
    local text = {}
    for i = 1, 6 do
      text[#text + 1] = #c[i]
      text[#text + 1] = ':'
      text[#text + 1] = c[i]
    end
    if redis.sha1hex(table.concat(text)) ~= digest then return nil end
  end
  local n, ttl, done = tonumber(c[1]), tonumber(c[2]), tonumber(c[7])
  if not (whole(n) and whole(ttl) and (done == 0 or whole(done))) then return nil end
  if type(index) ~= 'number' or index < 0 or index >= n or (c[5] ~= '0' and c[5] ~= '1') then
    return nil
  end
  local ok, job = pcall(cmsgpack.unpack, c[6])
  if not ok or not chord_body_op(job, key) then return nil end
  return {n = n, ttl = ttl, pre = c[3], post = c[4], imm = c[5], job = job}
end

-- ["chord_add", key, index, result, digest]: one header result, counted once per index; the
-- last one enqueues the body with every result in order, and the chord's state goes. A
-- state that ended (or failed) already, or fails chord_state, takes nothing.
local function op_chord_add(op, now)
  local c = chord_state(op[2], op[3], op[5])
  if not c then return end
  if redis.call('HSETNX', op[2], 'r:' .. op[3], op[4]) == 0 then return end
  local done = redis.call('HINCRBY', op[2], 'done', 1)
  local n = c.n
  if done < n then
    redis.call('PEXPIRE', op[2], c.ttl)
    return
  end
  local body = c.pre
  if c.imm ~= '1' then
    local names = {}
    for i = 0, n - 1 do names[#names + 1] = 'r:' .. i end
    local parts = {c.pre, array_header(n)}
    for start = 1, n, 1000 do  -- HMGET in slices: unpack has a stack limit
      local slice = {}
      for i = start, math.min(n, start + 999) do slice[#slice + 1] = names[i] end
      for _, r in ipairs(redis.call('HMGET', op[2], unpack(slice))) do parts[#parts + 1] = r end
    end
    parts[#parts + 1] = c.post
    body = table.concat(parts)
  end
  redis.call('DEL', op[2])
  c.job[4], c.job[12] = body, nil  -- (its done list: not taken from the stored state)
  run_ops({c.job}, now)
end

-- ["fail", record, done, ttl ms, cause id, cause task, cause type, cause error]: a later step
-- of a workflow will never run, because an earlier one failed.
local function op_fail(op, now)
  finish_record(op[2], op[3], 'failed', op[4], now, 'cause', op[5], 'cause_task', op[6],
    'cause_type', op[7], 'cause_error', op[8])
end

local OPS = {
  job = op_job,
  schedule = op_schedule,
  chord_add = op_chord_add,
  fail = op_fail,
  -- ["record", record, ttl ms, task, queue, priority]: a later step, not started yet.
  record = function(op, now)
    redis.call('HSET', op[2], 'state', 'pending', 'task', op[4], 'queue', op[5],
      'priority', op[6])
    redis.call('PEXPIRE', op[2], op[3])
  end,
  -- ["chord_new", key, n, ttl ms, pre, post, immutable, body op]: a chord's state (n, ttl
  -- ms and immutable as decimal text, as chord_state reads them back for its digest).
  chord_new = function(op, now)
    redis.call('HSET', op[2], 'n', op[3], 'done', 0, 'ttl', op[4], 'pre', op[5], 'post', op[6],
      'imm', op[7], 'op', op[8])
    redis.call('PEXPIRE', op[2], op[4])
  end,
  -- ["chord_fail", key, ops]: the chord fails (once: its state goes) and runs its ops.
  chord_fail = function(op, now)
    if redis.call('DEL', op[2]) == 1 then run_ops(op[3], now) end
  end,
  -- ["unlock", lock key, job id]: a unique job ended: its lock goes, if it still holds it,
  -- and a keep_last follow-up stored while it ran takes the lock and enters its stream.
  unlock = function(op, now)
    if redis.call('GET', op[2]) == op[3] then
      redis.call('DEL', op[2])
      enqueue_follow_up(op[2], op[3], now)
    end
  end,
  -- ["release", running, held, job id, n, queue]: a job of a concurrency-limited task left
  -- its slot (it ended, or waits for a retry); a job waiting for a slot takes it.
  release = function(op, now)
    local suffix = '|' .. op[4]
    for _, m in ipairs(redis.call('ZRANGE', op[2], 0, -1)) do
      if string.sub(m, -#suffix) == suffix then redis.call('ZREM', op[2], m) end
    end
    refill(op[2], op[3], tonumber(op[5]), op[6], 0, now)
  end,
  -- ["flow", key, ttl ms, kind, info]: a workflow's own record.
  flow = function(op, now)
    redis.call('HSET', op[2], 'kind', op[4], 'info', op[5], 'created_ms', now)
    redis.call('PEXPIRE', op[2], op[3])
  end,
}

run_ops = function(ops, now)
  for _, op in ipairs(ops) do
    local f = OPS[op[1]]
    if not f then error('unknown workflow op ' .. tostring(op[1])) end
    f(op, now)
  end
end
