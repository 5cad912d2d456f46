-- A worker's registry record, written whole, with its expiry; and the queue's visibility
-- timeout, which every live worker of the queue must share (leases, fences and the sweep all
-- depend on it). The setting key lives as long as some worker keeps beating.
-- KEYS: per queue, 3 keys: worker record, workers zset, visibility setting.
-- ARGV: worker id, ttl ms, visibility timeout ms, then field/value pairs of the record.
-- Returns {} or {queue index (1-based), the other visibility timeout} on a mismatch; the
-- record is written either way, the setting only where it matches.
local ttl = tonumber(ARGV[2])
if not ttl or ttl < 1 or (#ARGV - 3) % 2 ~= 0 then
  return redis.error_reply('ERR heartbeat: bad arguments')
end
local now = now_ms()
local conflict = {}
for q = 0, #KEYS / 3 - 1 do
  local rec, workers, vis = KEYS[q * 3 + 1], KEYS[q * 3 + 2], KEYS[q * 3 + 3]
  redis.call('DEL', rec)
  redis.call('HSET', rec, 'heartbeat_ms', now, unpack(ARGV, 4))
  redis.call('PEXPIRE', rec, ttl)
  redis.call('ZADD', workers, now, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', workers, '-inf', now - ttl)
  local current = redis.call('GET', vis)
  if current and current ~= ARGV[3] then
    if #conflict == 0 then conflict = {q + 1, current} end
  else
    redis.call('SET', vis, ARGV[3], 'PX', ttl)
  end
end
return conflict
