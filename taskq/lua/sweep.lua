-- Crash recovery for one stream: entries idle past the visibility timeout (their worker died)
-- move to the retry pseudo-consumer and are due at once. Resumes from the cursor the previous
-- sweep left; XAUTOCLAIM is atomic per call, so no lock is needed.
-- KEYS: stream, retry zset, cursor.  ARGV: group, retry consumer, min idle ms, count, now_ms.
-- Returns {entries recovered, 1 if the scan wrapped around}.
local cur = redis.call('GET', KEYS[3]) or '0-0'
local r = redis.pcall('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], cur, 'COUNT', ARGV[4],
  'JUSTID')
if type(r) == 'table' and r.err then
  if string.find(r.err, 'NOGROUP', 1, true) then return {0, 1} end
  return r
end
redis.call('SET', KEYS[3], r[1])
local n = 0
for _, id in ipairs(r[2]) do
  -- NX: an entry already waiting out a backoff keeps its due time.
  n = n + redis.call('ZADD', KEYS[2], 'NX', ARGV[5], id)
end
return {n, r[1] == '0-0' and 1 or 0}
