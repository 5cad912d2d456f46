-- Merge per-task run summaries into a queue's minute and hour buckets, in one step (a worker
-- writes once per second at most, never per job). A summary is msgpack
-- {runs, failures, retries, max ms, {bucket index -> runs}}; merging adds the counts and the
-- buckets and keeps the larger max. A value that does not unpack as one is replaced.
-- KEYS: the minute bucket, the hour bucket.
-- ARGV: minute ttl ms, hour ttl ms, then task name and summary pairs.
local function merge(old, new)
  local ok, o = pcall(cmsgpack.unpack, old or '')
  if not (ok and type(o) == 'table' and type(o[5]) == 'table') then return new end
  local n = cmsgpack.unpack(new)
  for i = 1, 3 do o[i] = (tonumber(o[i]) or 0) + n[i] end
  o[4] = math.max(tonumber(o[4]) or 0, n[4])
  for b, c in pairs(n[5]) do o[5][b] = (tonumber(o[5][b]) or 0) + c end
  return cmsgpack.pack(o)
end

for k = 1, 2 do
  for i = 3, #ARGV, 2 do
    local task, summary = ARGV[i], ARGV[i + 1]
    local ok, n = pcall(cmsgpack.unpack, summary)
    if ok and type(n) == 'table' and type(n[5]) == 'table' then
      redis.call('HSET', KEYS[k], task, merge(redis.call('HGET', KEYS[k], task), summary))
    end
  end
  redis.call('PEXPIRE', KEYS[k], ARGV[k])
end
return 1
