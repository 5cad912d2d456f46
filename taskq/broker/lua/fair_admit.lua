-- A reader's admission (docs/fairness.md), sent in the same write just before its read of a
-- fair queue's streams: the keys' turns move into the streams as many staged jobs as that
-- read will take beyond the jobs already undelivered there, in strict priority (a stream
-- gets jobs only while the streams before it leave room in the read). Entries the read
-- does not take (another reader came between, a crash) are undelivered jobs the next
-- admission counts: nothing is held back from the stream or admitted twice.
-- KEYS: the streams of fair queues the read takes, in its order.
-- ARGV: group, count (the read's most jobs).
-- Returns how many jobs went in.
local group, count = ARGV[1], tonumber(ARGV[2])
if not count or count < 1 or count ~= math.floor(count) then
  return redis.error_reply('ERR fair_admit: bad count')
end
local left, admitted = count, 0
for _, stream in ipairs(KEYS) do
  if left <= 0 then break end
  left = left - fair_undelivered(stream, group, left)
  if left > 0 then
    local n = fair_admit(stream, left)
    admitted, left = admitted + n, left - n
  end
end
return admitted
