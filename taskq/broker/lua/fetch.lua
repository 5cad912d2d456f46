-- Acknowledge finished jobs, promote due delayed jobs, then deliver up to COUNT jobs in strict
-- priority order (due retries, then new entries, per stream), all in one round trip.
-- KEYS: per queue, 9 keys: stream high/normal/low, retry zset high/normal/low, schedule,
--       failures, dead-letter stream.
-- ARGV: group, consumer, count, fence acks (0/1), keys per queue (9), n_acks, then n_acks
--       triples (stream key index, entry id, failures key index or 0).
-- Returns {ms until the next retry or delayed job is due, or -1 if none; then per delivery:
--          stream key index, entry id, deliveries, fields}.
local group, consumer = ARGV[1], ARGV[2]
local count, nacks = tonumber(ARGV[3]), tonumber(ARGV[6])
local fence = ARGV[4] == '1'
local PER_QUEUE = tonumber(ARGV[5])
local PAGE = 1000

-- Acks, fenced like every other move: only entries still pending under this consumer (one
-- that lost a job to the sweep must not delete it under its new owner). The caller skips the
-- fence for jobs it fetched less than half a visibility timeout ago: the sweep only takes
-- entries idle for a whole one. One XACK and one XDEL per stream for the whole batch.
local acked, order = {}, {}
local a = 7
for _ = 1, nacks do
  local k = tonumber(ARGV[a])
  if not acked[k] then
    acked[k] = {}
    order[#order + 1] = k
  end
  acked[k][#acked[k] + 1] = {ARGV[a + 1], tonumber(ARGV[a + 2])}
  a = a + 3
end
-- The entries pending under this consumer, read in pages (there may be more than a page).
local function pending_here(key)
  local mine, start = {}, '-'
  while true do
    local p = redis.pcall('XPENDING', key, group, start, '+', PAGE, consumer)
    if type(p) ~= 'table' or p.err then return nil end
    for _, e in ipairs(p) do mine[e[1]] = true end
    if #p < PAGE then return mine end
    start = '(' .. p[#p][1]
  end
end
for _, k in ipairs(order) do
  local mine = fence and pending_here(KEYS[k]) or {}
  if mine then
    local ids = {}
    for _, ack in ipairs(acked[k]) do
      if mine[ack[1]] or not fence then
        ids[#ids + 1] = ack[1]
        if ack[2] > 0 then redis.call('HDEL', KEYS[ack[2]], KEYS[k] .. ' ' .. ack[1]) end
      end
    end
    if #ids > 0 then
      redis.call('XACK', KEYS[k], group, unpack(ids))
      redis.call('XDEL', KEYS[k], unpack(ids))
    end
  end
end
if count == 0 then return {-1} end
local now = now_ms()

-- Promote due delayed jobs. A member is "<priority index 0-2>\n<task>\n<body>"; anything else
-- goes to the dead-letter stream with the reason instead of stopping every fetch.
local nq = #KEYS / PER_QUEUE
for q = 0, nq - 1 do
  local b = q * PER_QUEUE
  local due = redis.call('ZRANGEBYSCORE', KEYS[b + 7], '-inf', now, 'LIMIT', 0, 100)
  for _, m in ipairs(due) do
    local p = tonumber(string.sub(m, 1, 1))
    local nl = string.find(m, '\n', 3, true)
    if p ~= nil and p >= 0 and p <= 2 and string.sub(m, 2, 2) == '\n' and nl then
      redis.call('XADD', KEYS[b + 1 + p], '*', 'task', string.sub(m, 3, nl - 1),
        'body', string.sub(m, nl + 1))
    else
      redis.call('XADD', KEYS[b + 9], '*', 'first_failure_ms', now, 'last_failure_ms', now,
        'task', '', 'job_id', '', 'body', m, 'error_type', 'Rejected',
        'error', 'malformed schedule member (want "<0-2>\\n<task>\\n<body>")',
        'traceback', '', 'attempts', 0, 'worker', consumer, 'stream', KEYS[b + 7],
        'entry_id', '')
    end
    redis.call('ZREM', KEYS[b + 7], m)
  end
end

local out, got = {-1}, 0
local function read_new(skey, n)
  local r = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', n, 'STREAMS', skey, '>')
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'NOGROUP', 1, true) then return redis.error_reply(r.err) end
    -- The stream or its group was deleted (FLUSHALL, DEL): recreate it and read from the start.
    redis.call('XGROUP', 'CREATE', skey, group, '0', 'MKSTREAM')
    r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', n, 'STREAMS', skey, '>')
  end
  return r
end

for q = 0, nq - 1 do
  local b = q * PER_QUEUE
  for p = 1, 3 do
    if got >= count then break end
    local skey, rkey = KEYS[b + p], KEYS[b + 3 + p]
    local due = redis.call('ZRANGEBYSCORE', rkey, '-inf', now, 'LIMIT', 0, count - got)
    for _, id in ipairs(due) do
      redis.call('ZREM', rkey, id)
      -- XCLAIM without JUSTID bumps the delivery count: a retry is a new attempt.
      local c = redis.pcall('XCLAIM', skey, group, consumer, 0, id)
      if type(c) == 'table' and not c.err and c[1] then
        local pend = redis.call('XPENDING', skey, group, id, id, 1)
        out[#out + 1] = b + p
        out[#out + 1] = c[1][1]
        out[#out + 1] = pend[1] and pend[1][4] or 1
        out[#out + 1] = c[1][2]
        got = got + 1
      end
    end
    if got < count then
      local r = read_new(skey, count - got)
      if type(r) == 'table' and r.err then return r end
      if r and r[1] then
        for _, e in ipairs(r[1][2]) do
          out[#out + 1] = b + p
          out[#out + 1] = e[1]
          out[#out + 1] = 1
          out[#out + 1] = e[2]
          got = got + 1
        end
      end
    end
  end
end

if got == 0 then
  -- Nothing to do: tell the caller when the next retry or delayed job is due.
  local nxt = -1
  for q = 0, nq - 1 do
    for k = 4, 7 do
      local z = redis.call('ZRANGE', KEYS[q * PER_QUEUE + k], 0, 0, 'WITHSCORES')
      if z[2] then
        local s = tonumber(z[2])
        if nxt < 0 or s < nxt then nxt = s end
      end
    end
  end
  out[1] = nxt < 0 and -1 or math.max(0, nxt - now)
end
return out
