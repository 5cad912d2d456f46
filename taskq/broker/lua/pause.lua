-- Pause: a field in the queue's paused hash (the pause, see taskq/pauses.py) whose value is
-- when it began (ms, Redis clock), and its audit entry, in one step. Workers read the hash at
-- least every half second.
-- KEYS: paused hash, audit stream.
-- ARGV: pause field, the audit stream's cap (entries), then the audit entry's fields.
-- Returns 1 if the pause is new, 0 if it was there already (its start is kept).
local cap = tonumber(ARGV[2])
if not cap or cap < 1 then return redis.error_reply('ERR pause: bad audit cap') end
local new = redis.call('HSETNX', KEYS[1], ARGV[1], now_ms())
redis.call('XADD', KEYS[2], 'MAXLEN', '~', cap, '*', unpack(ARGV, 3))
return new
