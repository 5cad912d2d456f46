-- A running task's log records, one flush of its child's buffer (taskq/worker/telemetry.py):
-- they join the job's log list, then the oldest go (counted in 'dropped') while the list's
-- elements add up to more than log_max_bytes; both keys get the TTL. The job's own keys:
-- no record field is written, so a late flush brings back no ended record.
-- KEYS: the job's log list, its counters (hash: bytes, dropped).
-- ARGV: ttl_ms, log_max_bytes, records...
-- Returns the number of records dropped by this call.
local ttl, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
if not (ttl and ttl > 0 and cap and cap > 0) then
  return redis.error_reply('ERR telemetry_logs: malformed arguments')
end
local added = 0
for i = 3, #ARGV do
  redis.call('RPUSH', KEYS[1], ARGV[i])
  added = added + #ARGV[i]
end
local bytes = redis.call('HINCRBY', KEYS[2], 'bytes', added)
local dropped = 0
while bytes > cap do
  local oldest = redis.call('LPOP', KEYS[1])
  if not oldest then break end
  bytes = bytes - #oldest
  dropped = dropped + 1
end
if dropped > 0 then
  redis.call('HSET', KEYS[2], 'bytes', math.max(bytes, 0))
  redis.call('HINCRBY', KEYS[2], 'dropped', dropped)
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return dropped
