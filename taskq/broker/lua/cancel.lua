-- Cancel a job that keeps a status record, wherever it is, in one step. A job not yet
-- delivered (waiting in its stream, delayed in the schedule, or waiting out a retry backoff)
-- is removed and its record ends as cancelled: it never runs. A delivered job (running, or
-- in a worker's prefetched batch) gets a tombstone that its worker's master acts on.
-- KEYS: record, done list, streams high/normal/low, schedule, retry sets high/normal/low,
--       tombstone, counts hash, audit stream, then record and done list of each later
--       workflow step (the record's 'later' field, read and checked by the caller).
-- ARGV: job id, group, ttl ms, terminate ('1' or '0'), then each later step's ttl ms, keep
--       ms (below), then, to audit the cancel, the audit stream's cap and the audit entry's
--       fields (its 'detail', a JSON object, gets the outcome): the entry is appended in
--       this step, whatever the outcome (not on an error reply).
-- Keys named in the record ('held', 'slot_for') are used only if they are this queue's held
-- sets (the record is untrusted); the running set of a held set is derived from it.
-- A job without a record (keep ms: '' to leave such jobs alone) is
-- looked for by its id in the bodies of its queue's undelivered entries, schedule and retry
-- sets (up to SCAN_MAX of each) and removed there; else a tombstone '<queue>:cancelled'
-- (hash: job id -> "<keep until ms>|<terminate 0/1>") stops it at its worker (before it
-- starts; with terminate, also while it runs), kept `keep ms`. A removed one is noted in
-- '<queue>:ended' (zset "cancelled:<id>" -> kept until, `ttl ms` on), which its status reads.
-- Returns the outcome: 'cancelled', 'running' (not interrupted), 'terminating', 'requested'
-- (a job without a record, not found waiting: its tombstone stands), 'unknown', or the
-- final state the job had already reached.
local SCAN_MAX = 100000

-- Whether `body` is the body of job `id`: its first 'id' key names it (where producers
-- write it; a body with bin fields is read the same way).
local function body_is(body, id)
  local at = string.find(body, '\162id', 1, true)
  if not at then return false end
  local h, n, from = string.byte(body, at + 3), nil, nil
  if h and h >= 0xa0 and h <= 0xbf then n, from = h - 0xa0, at + 4
  elseif h == 0xd9 then n, from = string.byte(body, at + 4), at + 5 end
  return n == #id and string.sub(body, from, from + n - 1) == id
end

-- Remove a job without a record from wherever it waits undelivered; its tombstone else.
-- KEYS[3..5] streams, KEYS[6] schedule, KEYS[7..9] retry sets, KEYS[11] counts.
local function cancel_unrecorded(id, keep, ttl, terminate, group)
  local now = now_ms()
  local prefix = string.sub(KEYS[11], 1, #KEYS[11] - 7)  -- '<queue>:counts'
  local ended, tombs = prefix .. ':ended', prefix .. ':cancelled'
  local function removed()
    redis.call('HINCRBY', KEYS[11], 'cancelled', 1)
    redis.call('ZREMRANGEBYSCORE', ended, '-inf', now)
    redis.call('ZADD', ended, now + ttl, 'cancelled:' .. id)
    if redis.call('PTTL', ended) < ttl then redis.call('PEXPIRE', ended, ttl) end
    redis.call('HDEL', tombs, id)
    return 'cancelled'
  end
  for k = 3, 5 do
    local last = last_delivered(KEYS[k], group)
    local from = last and ('(' .. last) or '-'
    for _, e in ipairs(redis.call('XRANGE', KEYS[k], from, '+', 'COUNT', SCAN_MAX)) do
      for f = 1, #e[2], 2 do
        if e[2][f] == 'body' and body_is(e[2][f + 1], id) then
          redis.call('XDEL', KEYS[k], e[1])
          return removed()
        end
      end
    end
  end
  for k = 6, 9 do
    for _, m in ipairs(redis.call('ZRANGE', KEYS[k], 0, SCAN_MAX - 1)) do
      local body = m
      if k > 6 then body = string.match(body, '^[^\n]*\n(.*)$') or '' end
      body = string.match(body, '^%d\n[^\n]*\n(.*)$') or ''
      if body_is(body, id) then
        redis.call('ZREM', KEYS[k], m)
        return removed()
      end
    end
  end
  -- Delivered already, or not there (yet): the tombstone stops it at its worker. Tombstones
  -- past their time go first (there are few: one per pending cancel).
  local all = redis.call('HGETALL', tombs)
  for i = 1, #all, 2 do
    local until_ms = tonumber(string.match(all[i + 1], '^(%d+)|'))
    if not until_ms or until_ms <= now then redis.call('HDEL', tombs, all[i]) end
  end
  redis.call('HSET', tombs, id, (now + keep) .. '|' .. (terminate and '1' or '0'))
  if redis.call('PTTL', tombs) < keep then redis.call('PEXPIRE', tombs, keep) end
  return 'requested'
end

local rec, id = KEYS[1], ARGV[1]
local steps = (#KEYS - 12) / 2  -- later workflow steps
local audit_at = 6 + steps  -- the audit's cap, if the cancel is audited
local detail, detail_at = nil, nil
if #ARGV >= audit_at then
  local cap = tonumber(ARGV[audit_at])
  if not cap or cap < 1 then return redis.error_reply('ERR cancel: bad audit cap') end
  for i = audit_at + 1, #ARGV - 1, 2 do
    if ARGV[i] == 'detail' then
      local ok, d = pcall(cjson.decode, ARGV[i + 1])
      if ok and type(d) == 'table' then detail, detail_at = d, i + 1 end
    end
  end
  if not detail then return redis.error_reply('ERR cancel: bad audit detail') end
end

-- The outcome, appended to the audit stream with the cancel (when audited).
local function done(outcome)
  if detail then
    detail['outcome'] = outcome
    local fields = {unpack(ARGV, audit_at + 1)}
    fields[detail_at - audit_at] = cjson.encode(detail)
    redis.call('XADD', KEYS[12], 'MAXLEN', '~', ARGV[audit_at], '*', unpack(fields))
  end
  return outcome
end

local state = redis.call('HGET', rec, 'state')
if not state then
  local keep, ttl = tonumber(ARGV[5 + steps]), tonumber(ARGV[3])
  if #ARGV < 5 + steps or not keep or keep <= 0 then return done('unknown') end
  if not ttl or ttl <= 0 then return redis.error_reply('ERR cancel: bad ttl') end
  return done(cancel_unrecorded(id, keep, ttl, ARGV[4] == '1', ARGV[2]))
end
if FINAL[state] then return done(state) end
local p = ({high = 1, normal = 2, low = 3})[redis.call('HGET', rec, 'priority')] or 2

-- Whether an entry id is past the group's last delivered id (not delivered yet).
local function undelivered(stream, entry)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if not ok then return true end
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f['name'] == ARGV[2] then
      local lm, ls = string.match(f['last-delivered-id'], '^(%d+)-(%d+)$')
      local em, es = string.match(entry, '^(%d+)-(%d+)$')
      lm, ls, em, es = tonumber(lm), tonumber(ls), tonumber(em), tonumber(es)
      return em > lm or (em == lm and es > ls)
    end
  end
  return true
end

-- Remove the member of a sorted set that holds this job, at its due score.
local function remove_member(set, due, skip_first_line)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', set, due, due)) do
    local body = m
    if skip_first_line then body = string.match(body, '^[^\n]*\n(.*)$') or '' end
    body = string.match(body, '^%d\n[^\n]*\n(.*)$') or ''
    if body_job_id(body) == id then
      redis.call('ZREM', set, m)
      return true
    end
  end
  return false
end

-- A key read from the record, if it is one of this queue's keys of that kind (`head`:
-- '<queue>:<kind>:'); else nil.
local prefix = string.sub(rec, 1, #rec - #id - 5)  -- rec is '<queue>:job:<id>'
local held_head, lock_head = prefix .. ':held:', prefix .. ':unique:'
local function own(key, head)
  if type(key) == 'string' and #key > #head and string.sub(key, 1, #head) == head then
    return key
  end
  return nil
end
local function own_held(key) return own(key, held_head) end

-- A job moved back from a held set to its stream had a slot kept free for it: the next held
-- job takes it now (else it would wait until another job of the task came and ended).
local function pass_on_slot(now)
  local n, held = string.match(redis.call('HGET', rec, 'slot_for') or '', '^(%d+)|(.+)$')
  held = own_held(held)
  if not (n and held) then return end
  local running = prefix .. ':running:' .. string.sub(held, #held_head + 1)
  refill(running, held, tonumber(n), prefix, 0, now)
end

local removed = false
local held = own_held(redis.call('HGET', rec, 'held'))
if state == 'waiting' and held then  -- waiting for a concurrency slot, out of its stream
  for _, m in ipairs(redis.call('ZRANGE', held, 0, -1)) do
    if body_job_id(string.match(m, '^%d\n[^\n]*\n(.*)$') or '') == id then
      removed = redis.call('ZREM', held, m) == 1
      if removed then redis.call('HINCRBY', KEYS[11], 'held', -1) end
      break
    end
  end
elseif state == 'waiting' then
  local entry = redis.call('HGET', rec, 'entry')
  local stream = KEYS[2 + p]
  if entry == '' then  -- staged by its fairness key (docs/fairness.md)
    removed = fair_unstage(stream, redis.call('HGET', rec, 'fair_key'), id)
  elseif entry and undelivered(stream, entry) then
    local row = redis.call('XRANGE', stream, entry, entry)[1]
    removed = row and redis.call('XDEL', stream, entry) == 1 or false
  end
elseif state == 'scheduled' or state == 'retrying' or state == 'snoozed' then
  local due = redis.call('HGET', rec, 'due_ms')
  if due then
    if state ~= 'retrying' then removed = remove_member(KEYS[6], due, false)
    else removed = remove_member(KEYS[6 + p], due, true) end
  end
elseif state == 'pending' then
  removed = true  -- a later workflow step: the script that would start it sees the state
end
local now = now_ms()
if removed then
  local lock = own(redis.call('HGET', rec, 'unique'), lock_head)  -- its lock goes with it
  if lock and redis.call('GET', lock) == id then redis.call('DEL', lock) end
  if state == 'waiting' and not held then pass_on_slot(now) end
  finish_record(rec, KEYS[2], 'cancelled', tonumber(ARGV[3]), now)
  for j = 1, steps do  -- the steps after it will never start either
    finish_record(KEYS[11 + 2 * j], KEYS[12 + 2 * j], 'cancelled', tonumber(ARGV[4 + j]), now)
  end
  redis.call('HINCRBY', KEYS[11], 'cancelled', 1)
  return done('cancelled')
end
if ARGV[4] ~= '1' then return done('running') end
redis.call('SET', KEYS[10], '1', 'PX', ARGV[3])
return done('terminating')
