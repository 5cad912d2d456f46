-- The per-job path: ack what this consumer finished, then take up to COUNT new jobs in strict
-- priority order (KEYS order: per queue high, normal, low; queues in the worker's order).
-- Nothing else runs here: due delayed jobs and retries are promoted into the streams by the
-- worker masters (promote.lua), and the jobs of dead workers are recovered by the sweep.
-- It also tells the caller when the earliest delayed job or retry is due (from the queues'
-- due keys), so that the caller promotes them when they are (promote.lua): a cheap check on
-- every fetch instead of a poll.
-- An ack may come with a completion: the job's result for its status record, and the
-- writes that start what follows it in a workflow (_flow.lua), done only if the ack happens
-- (a fenced-off ack does nothing) and only once (a record already ended keeps its first
-- outcome). (A job taken here is marked running by its worker's master: start.lua.)
-- KEYS: the job streams, in read order, then each queue's due key, then every key the
--       completions touch.
-- ARGV: group, consumer, count, fence (0/1), trim (0/1), n_acks, number of streams,
--       n_completions, number of streams and due keys, then n_acks pairs (stream key index,
--       entry id), then (if n_completions > 0) the completions, one msgpack array of
--       {index of its ack (1-based), ms since the run ended, job id (nil: no record),
--       record ttl ms, result, attempts, run ms, ops}; then the key indexes of the streams
--       with acks since the caller's last trim.
-- A completion's record and done list are named from its job id and its ack's stream, as
-- the records of the jobs taken here are: the keys of one queue share its hash tag.
-- Returns {ms until something is due (-1: nothing; 0: due now), then per delivery: stream key
--          index, entry id, fields}.
-- (A fair queue's readers admit its next jobs just before this: fair_admit.lua.)
local group, consumer = ARGV[1], ARGV[2]
local count, nacks, nstreams = tonumber(ARGV[3]), tonumber(ARGV[6]), tonumber(ARGV[7])
local ncompletions, nfetchkeys = tonumber(ARGV[8]), tonumber(ARGV[9])
local fence, trim = ARGV[4] == '1', ARGV[5] == '1'
local PAGE = 1000
local first_ack = 10

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

-- Acks, fenced like every other move when the caller asks: only entries still pending under
-- this consumer (one that lost a job to the sweep must not ack it under its new owner). The
-- caller skips the fence for jobs it fetched less than half a visibility timeout ago: the
-- sweep only takes entries idle for a whole one. One XACK per stream for the whole batch.
local acked, order = {}, {}
for j = 1, nacks do
  local k = tonumber(ARGV[first_ack + 2 * j - 2])
  if not acked[k] then
    acked[k] = {}
    order[#order + 1] = k
  end
  acked[k][#acked[k] + 1] = j
end
local done = {}  -- the acks that happened, by their index (1-based)
for _, k in ipairs(order) do
  local mine = fence and pending_here(KEYS[k]) or {}
  if mine then
    local ids = {'XACK', KEYS[k], group}
    for _, j in ipairs(acked[k]) do
      local id = ARGV[first_ack + 2 * j - 1]
      if mine[id] or not fence then
        ids[#ids + 1] = id
        done[j] = true
      end
    end
    if #ids > 3 then redis.call(unpack(ids)) end
  end
end
local a = first_ack + 2 * nacks

local now
if ncompletions > 0 then
  now = now_ms()
  local queues = {}  -- by stream key index: its queue, which names the records
  for _, c in ipairs(cmsgpack.unpack(ARGV[a])) do
    if done[c[1]] then
      local first, ended = 1, now - c[2]
      if c[3] then
        local k = tonumber(ARGV[first_ack + 2 * c[1] - 2])
        local queue = queues[k] or queue_of(KEYS[k])
        queues[k] = queue
        local rec, done_list = job_keys(queue, c[3])
        first = finish_record(rec, done_list, 'succeeded', c[4], ended, 'result', c[5],
          'attempts', c[6], 'started_ms', ended - c[7])
      end
      if first == 1 and c[8] then run_ops(c[8], now) end
    end
  end
  a = a + 1
end

local out, got = {-1}, 0  -- (out holds 1 + 3 * got values)
local function read(k)
  local r = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count - got,
    'STREAMS', KEYS[k], '>')
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'NOGROUP', 1, true) then error(r) end
    -- The stream or its group was deleted (FLUSHALL, DEL): recreate it, read from the start.
    redis.call('XGROUP', 'CREATE', KEYS[k], group, '0', 'MKSTREAM')
    r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count - got,
      'STREAMS', KEYS[k], '>')
  end
  if r and r[1] then
    for _, e in ipairs(r[1][2]) do
      out[3 * got + 2], out[3 * got + 3], out[3 * got + 4] = k, e[1], e[2]
      got = got + 1
    end
  end
end
for k = 1, nstreams do
  if got >= count then break end
  read(k)
end

-- Finished jobs leave their stream by trimming: when the caller asks (every few dozen acks),
-- and when this call found nothing new (a burst just ended, so the streams empty).
if trim or got == 0 then
  for i = a, #ARGV do trim_finished(KEYS[tonumber(ARGV[i])], group) end
end

local soonest
for k = nstreams + 1, nfetchkeys do
  local due = tonumber(redis.call('GET', KEYS[k]))
  if due and (not soonest or due < soonest) then soonest = due end
end
if soonest then out[1] = math.max(0, soonest - (now or now_ms())) end
return out
