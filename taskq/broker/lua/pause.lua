-- Pause: a field in the queue's paused hash (the pause, see taskq/pauses.py) whose value is
-- when it began (ms, Redis clock). Workers read the hash at least every half second.
-- KEYS: paused hash.
-- ARGV: pause field.
-- Returns 1 if the pause is new, 0 if it was there already (its start is kept).
return redis.call('HSETNX', KEYS[1], ARGV[1], now_ms())
