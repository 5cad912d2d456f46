-- Admit jobs of a rate-limited task, or defer them, in one step: one job, or the run of a
-- batch's jobs that share the task's limit and stream (taken in their order, so a backlog of
-- deferrals costs one call per batch, not one per job).
-- The limit is a sliding window: at most N starts in any W ms, kept as a sorted set of start
-- slots (member: job id and attempt, score: the slot's time). A job over the limit gets the
-- first free slot in the future (at least W/N after the latest, so a backlog starts evenly
-- rather than in bursts of N) and waits for it in the schedule, out of its stream (so it
-- blocks nobody behind it), without using an attempt.
-- Every start is checked against the window, a job back at its slot too: it counts at its
-- slot if it is back within a quarter spacing (W/N/4) of it, else at now, and starts only if fewer
-- than N others count in the W ms up to then. A job that comes back late (its promotion
-- waited behind a backlog, its worker stalled) therefore cannot start in a burst with the
-- jobs after it: whichever would make N + 1 takes a new slot. Starts are exact on Redis's
-- clock to within a quarter spacing.
-- Every time here is a whole ms: the spacing is W/N rounded down (the window check alone keeps
-- N per W; the spacing only spreads a backlog, and rounding it up would run below the rate),
-- a slot read back from the set is rounded up (later, never earlier), so the scores, the due
-- key, the record's due_ms and every PEXPIRE are integers. The arguments are checked before
-- the first write (a script does not roll back): a bad call changes nothing.
-- KEYS: the limit's sorted set, stream, schedule, due key, then the jobs' records.
-- ARGV: group, owner, N, W ms, record ttl ms, then per job: entry id, slot member, schedule
--       member, index in KEYS of its record (0: none).
-- Returns per job 1 (run it now), 2 (deferred), or 0 (the entry is no longer the owner's:
-- nothing is written for it).
local now = now_ms()
local MAX_N, MAX_WINDOW, MAX_TTL = 1000000, 366 * 86400000, 2 ^ 48

-- ARGV[i] as a whole number in [lo, hi], else nil.
local function whole(i, lo, hi)
  local v = tonumber(ARGV[i])
  if v and v == math.floor(v) and v >= lo and v <= hi then return v end
  return nil
end

local function bad_arguments()
  if #ARGV < 9 or (#ARGV - 5) % 4 ~= 0 then return 'ERR limit: arguments must be 5 + 4 per job' end
  if not (whole(3, 1, MAX_N) and whole(4, 1, MAX_WINDOW) and whole(5, 1, MAX_TTL)) then
    return 'ERR limit: N, W or the record ttl is not a whole number in range'
  end
  for a = 6, #ARGV, 4 do
    local rec = whole(a + 3, 0, #KEYS)
    if not rec or (rec > 0 and rec < 5) or string.sub(ARGV[a + 2], 2, 2) ~= '\n' then
      return 'ERR limit: a job\'s record index or schedule member is malformed'
    end
  end
  -- Each key written must hold its kind (or nothing): a read of that kind errs otherwise
  -- (reads that the worker's ACL role has, rather than TYPE). KEYS[2], the stream, is
  -- written only for entries its fence found there (and the fence is a pcall).
  local probes = {{'ZCARD', KEYS[1]}, {'ZCARD', KEYS[3]}, {'GET', KEYS[4]}}
  for i = 5, #KEYS do probes[#probes + 1] = {'HGET', KEYS[i], 'state'} end
  for _, probe in ipairs(probes) do
    local r = redis.pcall(unpack(probe))
    if type(r) == 'table' and r.err then return 'ERR limit: ' .. probe[2] .. ' (' .. r.err .. ')' end
  end
  return nil
end

local bad = bad_arguments()
if bad then return redis.error_reply(bad) end
local key, n, window = KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local spacing = math.floor(window / n)
local quarter, half = math.floor(spacing / 4), math.floor(spacing / 2)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', key, '+inf', '+inf')  -- written by hand: no slot is that late
local out, deferred, first, added = {}, {}, nil, false

-- A slot time read from the set, as a whole ms (a fraction written by hand or by an older
-- version rounds up: a job never starts before its slot).
local function score(v)
  return math.ceil(tonumber(v))
end

-- The slot of a job new to the limit: after the latest slot by the spacing, and after the
-- N-th latest by W (the window then holds N); now if both are past.
local function next_slot()
  local slot = now
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then slot = math.max(slot, score(last[2]) + spacing) end
  if redis.call('ZCARD', key) >= n then
    local nth = redis.call('ZRANGE', key, -n, -n, 'WITHSCORES')
    slot = math.max(slot, score(nth[2]) + window)
  end
  return slot
end

-- The slot of a job back at (or after) its slot `held`: the time it counts at if the window
-- up to then has room, else the first free place from when the window's oldest start leaves
-- it (apart from other slots: late jobs that wait again must not come back together).
local function slot_back(member, held)
  local at = held >= now - quarter and held or now
  redis.call('ZREM', key, member)
  if redis.call('ZCOUNT', key, '(' .. (at - window), at) < n then return at, true end
  local oldest = redis.call('ZRANGEBYSCORE', key, '(' .. (at - window), at, 'WITHSCORES',
    'LIMIT', 0, 1)
  local slot = math.max(now + 1, score(oldest[2]) + window)
  for _ = 1, 8 do  -- a free place near the first room, not on top of another job's slot
    if redis.call('ZCOUNT', key, slot - half, slot + half) == 0 then
      return slot, false
    end
    slot = slot + spacing
  end
  return next_slot(), false  -- the backlog's slots are packed there: after them
end

-- The verdict for one job the caller still owns (a stale delivery, e.g. of a batch its
-- master handed back, is refused before anything is written for it: an admitted start that
-- never happens would use up one of the window's N).
local function admit_one(a)
  local entry, member = ARGV[a], ARGV[a + 1]
  local held, slot, admit = redis.call('ZSCORE', key, member), nil, nil
  if held then
    slot, admit = slot_back(member, score(held))
  else
    slot = next_slot()
    admit = slot <= now
  end
  redis.call('ZADD', key, slot, member)
  added = true
  if admit then return 1 end
  redis.call('ZADD', KEYS[3], slot, ARGV[a + 2])
  deferred[#deferred + 1] = entry
  first = math.min(first or slot, slot)
  local rec = tonumber(ARGV[a + 3])
  if rec > 0 then
    redis.call('HSET', KEYS[rec], 'state', 'scheduled', 'due_ms', slot)
    redis.call('HDEL', KEYS[rec], 'worker', 'started_ms')
    redis.call('PEXPIRE', KEYS[rec], slot - now + tonumber(ARGV[5]))
  end
  return 2
end

for a = 6, #ARGV, 4 do
  out[#out + 1] = owned(KEYS[2], ARGV[1], ARGV[a], ARGV[2]) and admit_one(a) or 0
end
if added then  -- the set lives until its latest slot has left the window
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, score(last[2]) - now + window)
end
if first then
  lower_due(KEYS[4], first)
  redis.call('XACK', KEYS[2], ARGV[1], unpack(deferred))
  redis.call('XDEL', KEYS[2], unpack(deferred))
end
return out
