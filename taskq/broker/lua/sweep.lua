-- Crash recovery for one stream: entries idle past the visibility timeout under a consumer
-- (their worker died) move to the retry pseudo-consumer and are due at once. Only real
-- consumers are scanned, with XPENDING's IDLE filter, so parked retries (however many) never
-- use up the budget. The script is atomic, so no lock is needed.
-- KEYS: stream, retry zset.  ARGV: group, retry consumer, min idle ms, at most this many.
-- Returns the number of entries recovered.
local group, retry = ARGV[1], ARGV[2]
local min_idle, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
if not min_idle or not budget or budget < 1 then
  return redis.error_reply('ERR sweep: min idle and budget must be numbers')
end
local cs = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], group)
if type(cs) == 'table' and cs.err then
  if string.find(cs.err, 'NOGROUP', 1, true) or string.find(cs.err, 'no such key', 1, true) then
    return 0
  end
  return cs
end
local now = now_ms()
local n = 0
for _, c in ipairs(cs) do
  local info = {}
  for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
  if n < budget and info.name ~= retry and info.pending > 0 then
    local p = redis.call('XPENDING', KEYS[1], group, 'IDLE', min_idle, '-', '+', budget - n,
      info.name)
    if #p > 0 then
      -- (unpack() only spreads as the last argument, so JUSTID goes in the table too.)
      local claim = {'XCLAIM', KEYS[1], group, retry, min_idle}
      for _, e in ipairs(p) do claim[#claim + 1] = e[1] end
      claim[#claim + 1] = 'JUSTID'
      redis.call(unpack(claim))
      -- NX: keep the due time of an entry that is somehow already in the retry set.
      for _, e in ipairs(p) do redis.call('ZADD', KEYS[2], 'NX', now, e[1]) end
      n = n + #p
    end
  end
end
return n
