-- Enqueue a unique job: the lock on its key and the job itself in one step, so of many
-- concurrent enqueues of one key exactly one adds a job and the others are told its id.
-- KEYS: lock, then every key the ops touch.
-- ARGV: job id, hold ms, ops (msgpack: the job's enqueue), index in KEYS of the job's record
--       (0: it keeps none), whether its end releases the lock ('1') or the lock just expires.
-- Returns the id of the job that holds the key (this one if it was enqueued).
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
run_ops(cmsgpack.unpack(ARGV[3]), now_ms())
local rec = tonumber(ARGV[4])
if rec > 0 and ARGV[5] == '1' then redis.call('HSET', KEYS[rec], 'unique', KEYS[1]) end
return ARGV[1]
