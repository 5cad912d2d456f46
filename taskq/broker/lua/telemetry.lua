-- A running task's telemetry, one flush of its child's buffer (taskq/worker/telemetry.py):
-- its latest progress replaces the last, its chunks join its output stream (trimmed to
-- about max_chunks), its log records join its log list (the oldest dropped and counted past
-- log_max_bytes), an end entry closes the stream when the job ended, and every key gets
-- the TTL. These keys are the job's own: no record field is written, so a late flush can
-- bring back no ended record.
-- KEYS: progress hash, output stream, log list, log counters (one job, one hash tag).
-- ARGV: ttl_ms, max_chunks, log_max_bytes, attempt, end state ('' while it runs),
--   n, n progress field/value pairs flattened (n = 2 x pairs), m, m chunks, k, k log records.
-- Returns the number of log records dropped by this call.
local ttl, max_chunks, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local attempt, ending = ARGV[4], ARGV[5]
local at = 6
local n_progress = tonumber(ARGV[at])
local n_chunks = n_progress and tonumber(ARGV[at + n_progress + 1])
local n_logs = n_chunks and tonumber(ARGV[at + n_progress + n_chunks + 2])
if not (ttl and ttl > 0 and max_chunks and max_chunks > 0 and cap and cap > 0 and n_logs)
  or #ARGV ~= at + n_progress + n_chunks + n_logs + 2 then
  return redis.error_reply('ERR telemetry: malformed arguments')
end

if n_progress > 0 then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], unpack(ARGV, at + 1, at + n_progress))
end
at = at + n_progress + 1
for i = at + 1, at + n_chunks do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', max_chunks, '*', 'a', attempt, 'c', ARGV[i])
end
at = at + n_chunks + 1
local dropped = 0
if n_logs > 0 then
  local added = 0
  for i = at + 1, at + n_logs do
    redis.call('RPUSH', KEYS[3], ARGV[i])
    added = added + #ARGV[i]
  end
  local bytes = redis.call('HINCRBY', KEYS[4], 'bytes', added)
  while bytes > cap do
    local oldest = redis.call('LPOP', KEYS[3])
    if not oldest then break end
    bytes = bytes - #oldest
    dropped = dropped + 1
  end
  if dropped > 0 then
    redis.call('HSET', KEYS[4], 'bytes', math.max(bytes, 0))
    redis.call('HINCRBY', KEYS[4], 'dropped', dropped)
  end
end
if ending ~= '' then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', max_chunks, '*', 'a', attempt, 'end', ending)
end
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, ttl)
end
return dropped
