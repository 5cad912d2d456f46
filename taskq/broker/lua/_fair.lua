-- Shared prologue: fair queues (docs/fairness.md). A fair queue's jobs wait staged in their
-- fairness key's list (<queue>:fair:<priority>:k:<key>) until the key's turn: the key's
-- turns list (<queue>:fair:<priority>:turns) holds each key with staged jobs once, in turn
-- order, and a turn moves up to the key's weight of its jobs into the stream (with the key
-- in a last field 'fk') and the key to the end of the turns. Readers admit, just before
-- their read and in the same write, the jobs that read will take (fair_admit.lua), so the
-- stream holds no backlog of admitted jobs and every batch takes the keys in turn.
-- <queue>:fair:waiting holds each key with staged jobs (any priority), scored by at least
-- its staged jobs: staging adds one, admitting takes none off (its lists' lengths are the
-- exact count, which readers sum), a key leaves when its last staged job does, and
-- fair_recount.lua sets the top keys' scores exact. <queue>:fair:<priority>:staged counts
-- each priority's staged jobs. Every key is named from the stream's own name, so a script
-- touches keys of that queue only (one hash tag).

local FAIR_GROUP = 'taskq'  -- (keys.py GROUP: the consumer group of every stream)

-- A key as producers check it: 1 to 200 bytes, no control characters or whitespace.
local function fair_key_ok(key)
  return type(key) == 'string' and #key >= 1 and #key <= 200 and not string.find(key, '[%c%s]')
end

-- The fairness keys of a stream "<queue>:<priority>" (keys.py QueueKeys.fair_*): its turns,
-- the head of its keys' staged lists (the list is head .. key), its staged count and last
-- admitted id, the queue's mark, waiting keys and weights, and whether any weight is set.
-- Named once per stream and call.
local fair_known = {}
local function fair_names(stream)
  local names = fair_known[stream]
  if names then return names end
  local queue, priority = string.match(stream, '^(.*):([^:]*)$')
  local head = queue .. ':fair:'
  names = {turns = head .. priority .. ':turns', staged = head .. priority .. ':k:',
    staged_count = head .. priority .. ':staged', last = head .. priority .. ':last',
    mode = head .. 'mode', waiting = head .. 'waiting', weights = queue .. ':fairweights'}
  names.lists = {}  -- (the key's staged lists of every priority: head .. key)
  for i, p in ipairs(PRIORITY_NAMES) do names.lists[i] = head .. p .. ':k:' end
  names.weighted = redis.call('EXISTS', names.weights) == 1
  fair_known[stream] = names
  return names
end

-- A weight as the weights hash holds it (`raw`, a reply): an integer 1..1000, else 1.
local function fair_weight_of(raw)
  local w = tonumber(raw)
  if not w or w ~= math.floor(w) or w < 1 or w > 1000 then return 1 end
  return w
end

-- A key's weight: 1 unless the weights hash sets another.
local function fair_weight(names, key)
  if not names.weighted then return 1 end
  return fair_weight_of(redis.call('HGET', names.weights, key))
end

-- How many staged jobs `key` has, every priority (a list of the wrong type counts as none):
-- its exact waiting count, which the waiting keys' score only bounds. The list of the
-- priority whose lists' head is `known_empty` (optional) is not read.
local function fair_staged_jobs(names, key, known_empty)
  local staged = 0
  for _, head in ipairs(names.lists) do
    local n = head ~= known_empty and redis.pcall('LLEN', head .. key)
    if type(n) == 'number' then staged = staged + n end
  end
  return staged
end

-- A staged element: the msgpack array of an entry's fields (task, body[, job, id]);
-- anything else is nil.
local function fair_fields(raw)
  local ok, f = pcall(cmsgpack.unpack, raw)
  if not ok or type(f) ~= 'table' then return nil end
  local n = #f
  if n < 4 or n % 2 ~= 0 or f[1] ~= 'task' then return nil end
  for i = 2, n do
    if type(f[i]) ~= 'string' then return nil end
  end
  return f
end

-- A staged job into `stream` (admitted with its key, or plain when `key` is nil); a job
-- that keeps a record gets its new entry id there.
local function fair_enter(stream, fields, key)
  if key then fields[#fields + 1], fields[#fields + 2] = 'fk', key end
  local id = redis.call('XADD', stream, '*', unpack(fields))
  if fields[5] == 'job' then
    local rec = record_key(stream, fields[6])
    if redis.call('HGET', rec, 'state') == 'waiting' then redis.call('HSET', rec, 'entry', id) end
  end
  return id
end

-- One turn of `key` (the caller takes it off the head of `stream`'s turns): up to its
-- weight of its staged jobs go into the stream. An element that is not an entry's fields is
-- dropped (and counted off); a key whose staged jobs are not a list has none (the caller
-- checked that `key` is one: fair_key_ok). Returns how many jobs went in, how many elements
-- left the key's list, the last entry id, and whether the key keeps its place in the turns
-- (it has more staged jobs).
local function fair_turn(stream, names, key)
  local list, w = names.staged .. key, fair_weight(names, key)
  local raws = redis.pcall('LPOP', list, w)
  if type(raws) ~= 'table' or raws.err then return 0, 0, nil, false end
  local admitted, id = 0, nil
  for _, raw in ipairs(raws) do
    local f = fair_fields(raw)
    if f then
      id = fair_enter(stream, f, key)
      admitted = admitted + 1
    end
  end
  return admitted, #raws, id, #raws == w and redis.call('LLEN', list) > 0
end

-- Turns of `stream`'s keys, from the head of its turns, until `n` jobs went in (a turn is
-- never cut short: a key of weight 3 may take the last place and two more) or no key has
-- staged jobs. The keys are read a round at a time (one LRANGE) and turned in memory: a
-- round's keys leave the head at once (one LPOP) and those with more staged jobs go to the
-- end, in order (one RPUSH); when the round read the whole turns, a key with more comes
-- round again within it, and the turns are rewritten once (LPOP of them all, RPUSH). A list
-- rotation per key, in three commands per round. The last admitted entry's id is kept (fair_idle), and
-- the keys left with no staged job in any priority leave the waiting keys (one ZREM; the
-- others' scores stay: admitting costs no update per key). Returns how many went in.
local function fair_admit(stream, n)
  local names, drained = fair_names(stream), {}
  local admitted, popped, last = 0, 0, nil
  while admitted < n do
    local want = n - admitted
    local keys = redis.pcall('LRANGE', names.turns, 0, want - 1)
    if type(keys) ~= 'table' or keys.err or #keys == 0 then break end  -- (none, or not a list)
    local read, i, kept = #keys, 1, {}
    local whole = read < want
    while admitted < n and i <= #keys do
      local key = keys[i]
      i = i + 1
      local ok, a, p, id, more = fair_key_ok(key), 0, 0, nil, false
      if ok then a, p, id, more = fair_turn(stream, names, key) end
      admitted, popped, last = admitted + a, popped + p, id or last
      if more then
        if whole then keys[#keys + 1] = key else kept[#kept + 1] = key end
      elseif not ok or fair_staged_jobs(names, key, names.staged) == 0 then
        drained[#drained + 1] = key
      end
    end
    if whole then  -- (the turns become the round's keys not turned yet, in order)
      for j = i, #keys do kept[#kept + 1] = keys[j] end
    end
    redis.call('LPOP', names.turns, whole and read or i - 1)
    if #kept > 0 then redis.call('RPUSH', names.turns, unpack(kept)) end
  end
  if last then redis.call('SET', names.last, last) end
  if popped > 0 then redis.call('INCRBY', names.staged_count, -popped) end
  if #drained > 0 then redis.pcall('ZREM', names.waiting, unpack(drained)) end
  return admitted
end

-- How many entries of `stream` its group `group` has not delivered yet, counted up to
-- `most`: those after the group's last delivered id (every entry, before a worker made the
-- group).
local function fair_undelivered(stream, group, most)
  local last = last_delivered(stream, group)
  if type(last) ~= 'string' or not string.match(last, '^%d+%-%d+$') then last = '0-0' end
  return #redis.call('XRANGE', stream, '(' .. last, '+', 'COUNT', most)
end

-- Whether a producer should admit a turn as it stages a job: every job admitted into
-- `stream` was delivered (its readers may be idle, blocked on the stream, and wake only for
-- an entry). It compares the last admitted id with the group's last delivered one, so that
-- producers need not read the stream's entries; undelivered plain entries wake the readers,
-- whose fetches admit.
local function fair_idle(stream)
  local last = redis.call('GET', fair_names(stream).last)
  if type(last) ~= 'string' or not string.match(last, '^%d+%-%d+$') then return true end
  local delivered = last_delivered(stream, FAIR_GROUP)
  if type(delivered) ~= 'string' or not string.match(delivered, '^%d+%-%d+$') then
    return false  -- (no group yet: no worker read the stream)
  end
  return not id_before(delivered, last)
end

-- Whether `stream`'s queue is marked fair (read once per stream and call): a job is staged
-- only where a fair worker admits it.
local function fair_on(stream)
  local names = fair_names(stream)
  if names.on == nil then names.on = redis.call('GET', names.mode) == 'on' end
  return names.on
end

-- A job enters `stream` of a fair queue (the caller checked `key` and the mark): staged at
-- the end of its key's list (a key that had none joins the end of the turns) and its score
-- in the queue's waiting keys goes up by one (waiting keys of the wrong type lose the
-- ranking, not the job); then, if every job admitted so far was delivered (fair_idle), one
-- turn goes in at once. `record` (a function, optional) writes the job's record with
-- entry '' first, so that an admission writes its entry there. Every way a producer's job
-- enters a fair queue (an enqueue, a delayed job when due, a unique or periodic job) goes
-- through here. Returns whether a turn went in.
local function fair_stage(stream, fields, key, record)
  local names = fair_names(stream)
  if redis.call('RPUSH', names.staged .. key, cmsgpack.pack(fields)) == 1 then
    redis.call('RPUSH', names.turns, key)
  end
  redis.call('INCRBY', names.staged_count, 1)
  redis.pcall('ZINCRBY', names.waiting, 1, key)
  if record then record('') end
  return fair_idle(stream) and fair_admit(stream, 1) > 0
end

-- Take a staged job that keeps a record out of its key's list (a cancel): the list is read
-- a page at a time for the element whose job id is `job`; a key left without staged jobs
-- leaves the turns (a scan of them: cancels are rare, fetches never scan). Returns whether
-- it was there.
local function fair_unstage(stream, key, job)
  if not fair_key_ok(key) then return false end
  local names = fair_names(stream)
  local list = names.staged .. key
  local n = redis.call('LLEN', list)
  for from = 0, n - 1, 1000 do
    for _, raw in ipairs(redis.call('LRANGE', list, from, from + 999)) do
      local f = fair_fields(raw)
      if f and f[5] == 'job' and f[6] == job then
        redis.call('LREM', list, 1, raw)
        if n == 1 then redis.call('LREM', names.turns, 0, key) end
        redis.call('INCRBY', names.staged_count, -1)
        if fair_staged_jobs(names, key) == 0 then
          redis.pcall('ZREM', names.waiting, key)
        else
          redis.pcall('ZINCRBY', names.waiting, -1, key)
        end
        return true
      end
    end
  end
  return false
end

-- An entry's fields without its 'fk' (a copy of it is a plain entry).
local function without_fair_key(fields)
  local out = {}
  for i = 1, #fields - 1, 2 do
    if fields[i] ~= 'fk' then
      out[#out + 1], out[#out + 2] = fields[i], fields[i + 1]
    end
  end
  return out
end
