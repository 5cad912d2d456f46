-- Claim ticks of a periodic schedule and enqueue their jobs, in one step: the schedule's last
-- tick moves from the value the caller read to the new one only if no other worker moved it
-- first, so each tick's job is enqueued once however many workers schedule it.
-- KEYS: the periodic hash, then every key the ops touch.
-- ARGV: name, expected value ('' for none), new value, ops (msgpack; may be empty).
-- Returns {1 if claimed else 0, the value now stored ('' for none), Redis time ms}.
local now = now_ms()
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then return {0, current, now} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
run_ops(cmsgpack.unpack(ARGV[4]), now)
return {1, ARGV[3], now}
