-- Housekeeping, run by every worker master every few tens of ms: move due delayed jobs and
-- due retries into their streams as fresh entries (XADD + ZREM in one step, so each runs
-- once), then keep the queue's due key (the earliest due time) up to date. The due key lets
-- a call that finds nothing due return after one GET. A delayed job with a fairness key
-- (docs/fairness.md) is staged as fair_enqueue.lua stages it while its queue is marked fair
-- (its fair keys are named from the stream: the queue's own, one hash tag); with a key that
-- is not one (a member written by hand) it enters plain, as where the queue is not fair.
-- KEYS: per queue, 9 keys: stream high/normal/low, schedule, retry high/normal/low, due key,
--       dead-letter stream.
-- ARGV: most members moved per set and call, force (0/1: look at the sets even when the due
--       key says nothing is due, e.g. for members a foreign producer added with a plain ZADD).
-- Returns ms until the next member is due (-1: none), over every queue.
local limit, force = tonumber(ARGV[1]), ARGV[2] == '1'
if not limit or limit < 1 then return redis.error_reply('ERR promote: bad limit') end
local now = now_ms()
local PER_QUEUE = 9

-- A schedule member is "<priority 0-2>\n<task>\n<body>" (the body after its fairness key:
-- fair_head); a retry member is the same (never with a key: retries enter directly) after a
-- "<first failure ms>\n" line. Returns stream key offset, task, body, first failure (or nil),
-- fairness key (or nil).
local function parse(m, retry)
  local ff
  if retry then
    local nl = string.find(m, '\n', 1, true)
    if not nl then return nil end
    ff = string.sub(m, 1, nl - 1)
    m = string.sub(m, nl + 1)
  end
  local p = tonumber(string.sub(m, 1, 1))
  local nl = string.find(m, '\n', 3, true)
  if p == nil or p < 0 or p > 2 or string.sub(m, 2, 2) ~= '\n' or not nl then return nil end
  local key, body = nil, string.sub(m, nl + 1)
  if not retry then
    key, body = fair_head(body)
    if not body then return nil end
  end
  return p + 1, string.sub(m, 3, nl - 1), body, ff, key
end

-- A promoted job's record (`rec`, if it keeps one) says waiting, with its entry ('' while
-- staged) and its fairness key if staged; a record that had expired is not brought back.
local function note_entry(rec, id, key)
  if not rec then return end
  local fresh = key and redis.call('HSET', rec, 'state', 'waiting', 'entry', id, 'fair_key', key)
    or redis.call('HSET', rec, 'state', 'waiting', 'entry', id)
  if fresh == (key and 3 or 2) then redis.call('DEL', rec) end  -- (no field was there)
end

-- The id of a job that keeps a status record (its body has a result TTL). Only bodies that
-- mention the key are decoded. Redis's Lua msgpack cannot read a body with binary (bin)
-- arguments; the id of such a body is read where producers write it, as its first string
-- value after the key "id".
local function move_due(b, set, retry)
  local due = redis.call('ZRANGEBYSCORE', KEYS[b + set], '-inf', now, 'LIMIT', 0, limit)
  for _, m in ipairs(due) do
    local s, task, body, ff, key = parse(m, retry)
    local batch = s and not retry and string.sub(body, 1, #BATCH_HEAD) == BATCH_HEAD
      and string.sub(body, #BATCH_HEAD + 1)
    if batch then
      -- A batch that is due: only a list of this queue's batches (the schedule's prefix).
      local head = string.sub(KEYS[b + set], 1, -#'schedule' - 1) .. 'batch:'
      if string.sub(batch, 1, #head) == head then flush_batch(batch, KEYS[b + s], task) end
    elseif s then
      local stream, fields, job = KEYS[b + s], {'task', task, 'body', body}, body_job_id(body)
      if job then fields[5], fields[6] = 'job', job end
      if ff then fields[#fields + 1], fields[#fields + 2] = 'ff', ff end
      local rec = job and record_key(stream, job)
      if key and fair_key_ok(key) and fair_on(stream) then
        fair_stage(stream, fields, key, function(id) note_entry(rec, id, key) end)
      else
        note_entry(rec, redis.call('XADD', stream, '*', unpack(fields)))
      end
    elseif not (retry and string.match(m, '^%d+%-%d+$')) then
      -- (A bare entry id is a retry parked by taskq 0.1.0, whose entry is still pending:
      -- the sweep recovers it. Anything else is dead-lettered with the reason.)
      redis.call('XADD', KEYS[b + 9], '*', 'task', '', 'job_id', '', 'body', m,
        'error_type', 'Rejected',
        'error', retry and 'malformed retry member' or 'malformed schedule member',
        'traceback', '', 'attempts', 0, 'first_failure_ms', now, 'last_failure_ms', now,
        'worker', '', 'stream', KEYS[b + set], 'entry_id', '')
    end
    redis.call('ZREM', KEYS[b + set], m)
  end
end

local soonest = -1
for q = 0, #KEYS / PER_QUEUE - 1 do
  local b = q * PER_QUEUE
  local due = tonumber(redis.call('GET', KEYS[b + 8]))
  if force or (due and due <= now) then
    move_due(b, 4, false)
    for set = 5, 7 do move_due(b, set, true) end
    due = nil
    for set = 4, 7 do
      local first = redis.call('ZRANGE', KEYS[b + set], 0, 0, 'WITHSCORES')
      if first[2] and (not due or tonumber(first[2]) < due) then due = tonumber(first[2]) end
    end
    if due then redis.call('SET', KEYS[b + 8], due) else redis.call('DEL', KEYS[b + 8]) end
  end
  if due and (soonest < 0 or due - now < soonest) then soonest = math.max(0, due - now) end
end
return soonest
