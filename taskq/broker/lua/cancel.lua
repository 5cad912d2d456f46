-- Cancel a job that keeps a status record, wherever it is, in one step. A job not yet
-- delivered (waiting in its stream, delayed in the schedule, or waiting out a retry backoff)
-- is removed and its record ends as cancelled: it never runs. A delivered job (running, or
-- in a worker's prefetched batch) gets a tombstone that its worker's master acts on.
-- KEYS: record, done list, streams high/normal/low, schedule, retry sets high/normal/low,
--       tombstone, counts hash, then record and done list of each later workflow step (the
--       record's 'later' field, read and checked by the caller).
-- ARGV: job id, group, ttl ms, terminate ('1' or '0'), then each later step's ttl ms.
-- Keys named in the record ('held', 'slot_for') are used only if they are this queue's held
-- sets (the record is untrusted); the running set of a held set is derived from it.
-- Returns the outcome: 'cancelled', 'running' (not interrupted), 'terminating', 'unknown',
-- or the final state the job had already reached.
local rec, id = KEYS[1], ARGV[1]
local state = redis.call('HGET', rec, 'state')
if not state then return 'unknown' end
if FINAL[state] then return state end
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
  if entry and undelivered(stream, entry) then
    removed = redis.call('XDEL', stream, entry) == 1
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
  for j = 1, (#KEYS - 11) / 2 do  -- the steps after it will never start either
    finish_record(KEYS[10 + 2 * j], KEYS[11 + 2 * j], 'cancelled', tonumber(ARGV[4 + j]), now)
  end
  redis.call('HINCRBY', KEYS[11], 'cancelled', 1)
  return 'cancelled'
end
if ARGV[4] ~= '1' then return 'running' end
redis.call('SET', KEYS[10], '1', 'PX', ARGV[3])
return 'terminating'
