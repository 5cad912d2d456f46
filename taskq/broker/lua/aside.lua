-- Set a fetched job aside while a pause covers it: out of its stream (acked and deleted)
-- into the pause's set, where it waits, not run and not lost, until the resume moves it
-- back (resume.lua). Fenced on the pause: if it was resumed meanwhile, nothing moves (the
-- worker runs the job). Its record, if any, stays 'waiting' and names the set ('held'), so
-- a cancel finds it there.
-- KEYS: stream, the pause's set, counts hash[, record]. The paused hash is named from the
--       counts hash (same queue): not declared, since a worker may only read it (ACL %R~)
--       and Redis checks a script's declared keys for writing.
-- ARGV: group, entry id, owner, pause field, member ("<priority>\n<task>\n<body>").
-- Returns 1 (set aside), 0 (the pause is gone) or -1 (not pending under `owner`).
local paused = string.sub(KEYS[3], 1, #KEYS[3] - 7) .. ':paused'
if redis.call('HEXISTS', paused, ARGV[4]) == 0 then return 0 end
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return -1 end
local now = now_ms()
redis.call('ZADD', KEYS[2], now, ARGV[5])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HINCRBY', KEYS[3], 'held', 1)
if KEYS[4] then
  if redis.call('HSET', KEYS[4], 'state', 'waiting', 'held', KEYS[2]) == 2 then
    redis.call('DEL', KEYS[4])  -- the record had expired
  else
    redis.call('HDEL', KEYS[4], 'worker', 'started_ms')
  end
end
return 1
