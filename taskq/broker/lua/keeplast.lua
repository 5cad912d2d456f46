-- Enqueue a keep_last unique job: with the key free, take it and enqueue the job (as
-- unique.lua); while the key's job waits, return its id; while it runs, store this job as the
-- key's one follow-up (replacing the one stored), which the running job's end enqueues
-- (the 'unlock' op). The follow-up is the producer's body, swapped whole (a signed body stays
-- signed); its id must be the stored follow-up's, so a call that does not know it is told it
-- and sends its body again with it.
-- KEYS: lock, follow-up, then every key the ops touch.
-- ARGV: job id, hold ms, ops (msgpack: the job's enqueue), index in KEYS of the job's record,
--       adopted ('1': the id is one this script named), the follow-up's schedule member
--       ("<p>\n<task>\n<body>"), record ttl ms, task, queue, priority, args.
-- Returns {'ok', id} (enqueued or stored as the follow-up), {'held', holder id} (its job
-- waits), or {'adopt', id}: send the body again with this id ('': with a fresh one).
local id, adopted = ARGV[1], ARGV[5] == '1'
local queue = string.match(KEYS[1], '^([^:]+):unique:.')  -- (the lock's queue: its hash tag)
local rec = tonumber(ARGV[4])
if not queue or not rec or rec < 3 or not KEYS[rec] then
  return redis.error_reply('ERR keeplast: bad lock or no record')
end
local held = redis.call('GET', KEYS[1])
if not held then
  if adopted then return {'adopt', ''} end  -- that follow-up was enqueued meanwhile
  redis.call('SET', KEYS[1], id, 'PX', ARGV[2])
  run_ops(cmsgpack.unpack(ARGV[3]), now_ms())
  redis.call('HSET', KEYS[rec], 'unique', KEYS[1])
  return {'ok', id}
end
-- Whether the holder runs: its record says so, or says waiting for an entry already delivered
-- (its master marks it running a moment after its child took it).
local h = redis.call('HMGET', queue .. ':job:' .. held, 'state', 'entry', 'priority')
local runs = h[1] == 'running' or h[1] == 'retrying'
local PRIORITY = {high = true, normal = true, low = true}
if h[1] == 'waiting' and h[2] and PRIORITY[h[3]] and id_parts(h[2]) then
  local last = last_delivered(queue .. ':' .. h[3], 'taskq')
  runs = last ~= nil and id_parts(last) ~= nil and not id_before(last, h[2])
end
if not runs then return {'held', held} end
-- (A follow-up of another job was left by a job cancelled while it ran: it is replaced.)
local stored = redis.call('GET', KEYS[2])
local follows, stored_id = string.match(stored or '', '^([^\n]*)\n([^\n]*)\n')
if follows ~= held then stored = nil end
if stored then
  if stored_id ~= id then return {'adopt', stored_id} end
elseif adopted then
  return {'adopt', ''}  -- that follow-up was enqueued meanwhile
end
redis.call('SET', KEYS[2], held .. '\n' .. id .. '\n' .. ARGV[2] .. '\n' .. ARGV[6], 'PX', ARGV[2])
local now = now_ms()
if not stored then fresh_record(KEYS[rec], KEYS[rec + 1]) end
redis.call('HSET', KEYS[rec], 'state', 'pending', 'task', ARGV[8], 'queue', queue,
  'priority', ARGV[10], 'args', ARGV[11], 'enqueued_ms', now, 'unique', KEYS[1])
redis.call('PEXPIRE', KEYS[rec], tonumber(ARGV[2]) + tonumber(ARGV[7]))
return {'ok', id}
