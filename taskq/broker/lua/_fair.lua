-- Shared prologue: fair queues (docs/fairness.md). A fair queue's admitted entries carry
-- their fairness key in a last field 'fk'; each key has at most its weight of them
-- undelivered in a priority's stream (<queue>:fair:<priority>:slots), the rest staged in
-- its list (<queue>:fair:<priority>:k:<key>), and <queue>:fair:waiting counts its waiting
-- jobs (staged and admitted). Every key is named from the stream's own name, so a script
-- touches keys of that queue only (one hash tag).

-- A key as producers check it: 1 to 200 bytes, no control characters or whitespace.
local function fair_key_ok(key)
  return type(key) == 'string' and #key >= 1 and #key <= 200 and not string.find(key, '[%c%s]')
end

-- The fairness keys of a stream "<queue>:<priority>" (keys.py QueueKeys.fair_*): its
-- slots hash, the head of its keys' staged lists (the list is head .. key), the queue's
-- waiting keys and weights, and whether any weight is set. Named once per stream and call
-- (a fetch releases many entries of one stream).
local fair_known = {}
local function fair_names(stream)
  local names = fair_known[stream]
  if names then return names end
  local queue, priority = string.match(stream, '^(.*):([^:]*)$')
  local head = queue .. ':fair:'
  names = {slots = head .. priority .. ':slots', staged = head .. priority .. ':k:',
    staged_count = head .. priority .. ':staged', mode = head .. 'mode',
    waiting = head .. 'waiting', weights = queue .. ':fairweights'}
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

-- One waiting job of the key less (its member goes at 0); `unwaited` (a table, optional)
-- collects it instead, for the caller's fair_unwait_all: one write per key and call.
local function fair_unwait(waiting, key, unwaited)
  if unwaited then
    unwaited[key] = (unwaited[key] or 0) + 1
    return
  end
  local left = tonumber(redis.call('ZINCRBY', waiting, -1, key))
  if left <= 0 then redis.call('ZREM', waiting, key) end
end

-- The waiting jobs collected by fair_unwait, off the waiting keys of `stream`'s queue: one
-- ZMSCORE, one ZADD and one ZREM for them all (a key whose count reaches 0 leaves).
local function fair_unwait_all(stream, unwaited)
  local keys = {}
  for key in pairs(unwaited) do keys[#keys + 1] = key end
  if #keys == 0 then return end
  local waiting = fair_names(stream).waiting
  local scores = redis.call('ZMSCORE', waiting, unpack(keys))
  local scored, emptied = {}, {}
  for i, key in ipairs(keys) do
    local left = (tonumber(scores[i]) or 0) - unwaited[key]
    if left > 0 then
      scored[#scored + 1], scored[#scored + 2] = left, key
    else
      emptied[#emptied + 1] = key
    end
  end
  if #scored > 0 then redis.call('ZADD', waiting, unpack(scored)) end
  if #emptied > 0 then redis.call('ZREM', waiting, unpack(emptied)) end
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

-- Admit the key's staged jobs into `stream` (at its tail) while it has fewer than its
-- weight admitted (`n`). A job that keeps a record gets its new entry id there. An element
-- that is not an entry's fields is dropped (and counted off). Returns how many it admitted
-- then (the caller writes the count). `w`: the key's weight, when the caller read it.
local function fair_admit_from(stream, key, n, unwaited, w)
  local names = fair_names(stream)
  w = w or fair_weight(names, key)
  local popped = 0
  while n < w do
    local raw = redis.call('LPOP', names.staged .. key)
    if not raw then break end
    popped = popped + 1
    local f = fair_fields(raw)
    if f then
      fair_enter(stream, f, key)
      n = n + 1
    else
      fair_unwait(names.waiting, key, unwaited)
    end
  end
  if popped > 0 then redis.call('INCRBY', names.staged_count, -popped) end
  return n
end

-- Whether a key's admitted count `n` is what its slots hash holds (`held`, HGET's reply): a
-- delivery that admits the key's next job leaves it as it was, and it is not written.
local function fair_slots_held(n, held)
  return held == tostring(n) or (n == 0 and not held)
end

-- The key's admitted count in its slots hash: `n`, written unless it holds it already.
local function fair_set_slots(slots, key, n, held)
  if fair_slots_held(n, held) then return end
  if n > 0 then redis.call('HSET', slots, key, n) else redis.call('HDEL', slots, key) end
end

-- fair_admit_from with the count the key's slots hold; returns how many went in.
local function fair_admit(stream, key)
  local slots = fair_names(stream).slots
  local held = redis.call('HGET', slots, key)
  local n = tonumber(held) or 0
  local now = fair_admit_from(stream, key, n)
  if now ~= n then fair_set_slots(slots, key, now, held) end
  return now - n
end

-- Whether `stream`'s queue is marked fair (read once per stream and call): a job is staged
-- only where a fair worker admits it.
local function fair_on(stream)
  local names = fair_names(stream)
  if names.on == nil then names.on = redis.call('GET', names.mode) == 'on' end
  return names.on
end

-- A job enters `stream` of a fair queue (the caller checked `key` and the mark): admitted
-- with its key (field 'fk') if the key has a free slot and no staged jobs, else staged at
-- the end of its list (first in, first out within a key; a weight raised since its jobs
-- were staged lets them in now); either way counted in the queue's waiting keys. `record`
-- (a function, optional) writes the job's record with its entry id ('' while staged), before
-- an admission writes the entry there. Every way a producer's job enters a fair queue (an
-- enqueue, a delayed job when due, a unique job) goes through here. Returns the entry id,
-- '' when staged.
local function fair_stage(stream, fields, key, record)
  local names = fair_names(stream)
  redis.call('ZINCRBY', names.waiting, 1, key)
  local admitted = tonumber(redis.call('HGET', names.slots, key)) or 0
  local room = admitted < fair_weight(names, key)
  local list = names.staged .. key
  if room and redis.call('LLEN', list) == 0 then
    fields[#fields + 1], fields[#fields + 2] = 'fk', key
    local id = redis.call('XADD', stream, '*', unpack(fields))
    redis.call('HSET', names.slots, key, admitted + 1)
    if record then record(id) end
    return id
  end
  redis.call('RPUSH', list, cmsgpack.pack(fields))
  redis.call('INCRBY', names.staged_count, 1)
  if record then record('') end
  if room then fair_admit(stream, key) end
  return ''
end

-- An admitted entry of the key left `stream` undelivered (cancelled, removed, moved; a
-- fetch's deliveries: fair_release_all): its slot frees, its waiting count drops, and its
-- next staged jobs go in. An entry whose 'fk' is not a key is left alone.
local function fair_release(stream, key)
  if not fair_key_ok(key) then return end
  local names = fair_names(stream)
  local held = redis.call('HGET', names.slots, key)
  local n = math.max(0, (tonumber(held) or 0) - 1)
  fair_unwait(names.waiting, key)
  fair_set_slots(names.slots, key, fair_admit_from(stream, key, n), held)
end

-- fair_release of admitted entries of `stream` just delivered, in their order (`keys`, their
-- 'fk's; a key repeats for each of its entries), with one HMGET of their slots (and one of
-- their weights, if any is set) and one HSET and one HDEL of the counts that changed. Their
-- waiting counts drop in `unwaited` (fair_unwait).
local function fair_release_all(stream, keys, unwaited)
  local names, count, held, weight = fair_names(stream), {}, {}, {}
  local reply = redis.call('HMGET', names.slots, unpack(keys))
  local weights = names.weighted and redis.call('HMGET', names.weights, unpack(keys)) or {}
  for i, key in ipairs(keys) do
    if not count[key] then
      count[key], held[key] = tonumber(reply[i]) or 0, reply[i]
      weight[key] = fair_weight_of(weights[i])
    end
  end
  for _, key in ipairs(keys) do
    fair_unwait(names.waiting, key, unwaited)
    local n = math.max(0, count[key] - 1)
    count[key] = fair_admit_from(stream, key, n, unwaited, weight[key])
  end
  local counts, freed = {}, {}
  for key, n in pairs(count) do
    if not fair_slots_held(n, held[key]) then
      if n > 0 then
        counts[#counts + 1], counts[#counts + 2] = key, n
      else
        freed[#freed + 1] = key
      end
    end
  end
  if #counts > 0 then redis.call('HSET', names.slots, unpack(counts)) end
  if #freed > 0 then redis.call('HDEL', names.slots, unpack(freed)) end
end

-- The 'fk' of an entry's field array (nil if it has none): its last field when admitted.
local function entry_fair_key(fields)
  if fields[#fields - 1] == 'fk' then return fields[#fields] end  -- (where admissions put it)
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'fk' then return fields[i + 1] end
  end
  return nil
end

-- An entry's fields without its 'fk': a copy of it is not admitted.
local function without_fair_key(fields)
  local out = {}
  for i = 1, #fields - 1, 2 do
    if fields[i] ~= 'fk' then
      out[#out + 1], out[#out + 2] = fields[i], fields[i + 1]
    end
  end
  return out
end

-- Delete an undelivered entry (it is removed, cancelled, moved): an admitted one frees its
-- key's slot. `fields` are its fields as XRANGE gave them. Returns XDEL's reply.
local function fair_delete(stream, id, fields)
  local n = redis.call('XDEL', stream, id)
  local key = n == 1 and entry_fair_key(fields)
  if key then fair_release(stream, key) end
  return n
end

-- Take a staged job that keeps a record out of its key's list (a cancel): the list is read
-- a page at a time for the element whose job id is `job`. Returns whether it was there.
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
        redis.call('INCRBY', names.staged_count, -1)
        fair_unwait(names.waiting, key)
        return true
      end
    end
  end
  return false
end
