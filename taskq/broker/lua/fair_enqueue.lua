-- Enqueue a job on a fair queue (docs/fairness.md): while the queue is marked fair, staged
-- behind its key's jobs, and admitted at once with a turn (the turns' first key's, so the
-- order stays fair) when every admitted job was delivered: idle workers, blocked on the
-- stream, wake for it. Otherwise the readers' next fetch admits it in its turn. A queue not
-- marked fair (no fair worker marked it yet, or `taskq fair off` cleared it) gets the plain
-- entry: nothing is staged where no worker admits it. A job that keeps a record gets it as
-- enqueue.lua writes it (entry '' while staged) and its key in field 'fair_key'.
-- KEYS: stream, fair mode, the key's staged list, waiting keys, then (a job that keeps a
--       record) its record and done list. (The turns and the weights hash, which producers
--       may only read, are named from the stream: Redis checks declared keys for writing.)
-- ARGV: task, body, fairness key, then with a record: job id, ttl ms, queue, priority,
--       args (msgpack [args, kwargs]).
-- Returns the entry id ('' when staged).
local key = ARGV[3]
if not fair_key_ok(key) then
  return redis.error_reply('ERR fair_enqueue: bad fairness key')
end
local recorded = #KEYS >= 6
local fields = {'task', ARGV[1], 'body', ARGV[2]}
if recorded then
  fields[5], fields[6] = 'job', ARGV[4]
  fresh_record(KEYS[5], KEYS[6])
end
local function write_record(id)
  if not recorded then return end
  redis.call('HSET', KEYS[5], 'state', 'waiting', 'task', ARGV[1], 'queue', ARGV[6],
    'priority', ARGV[7], 'args', ARGV[8], 'enqueued_ms', now_ms(), 'entry', id,
    'fair_key', key)
  redis.call('PEXPIRE', KEYS[5], ARGV[5])
end
if redis.call('GET', KEYS[2]) ~= 'on' then
  local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
  write_record(id)
  return id
end
if fair_stage(KEYS[1], fields, key, write_record) and recorded then
  return redis.call('HGET', KEYS[5], 'entry')  -- (it went in at once, or waits staged: '')
end
return ''
