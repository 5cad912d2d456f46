-- A fairness key's weight set at run time (taskq fair weight, app.set_fair_weight): its
-- field in the queue's weights hash (1, the default, deletes it) and its audit entry, in
-- one step. Fetches read it as they admit the key's next jobs.
-- KEYS: weights hash, audit stream.
-- ARGV: fairness key, weight (1..1000), the audit stream's cap, then the audit entry's fields.
local w, cap = tonumber(ARGV[2]), tonumber(ARGV[3])
if not fair_key_ok(ARGV[1]) or not w or w ~= math.floor(w) or w < 1 or w > 1000 then
  return redis.error_reply('ERR fair_weight: bad key or weight')
end
if not cap or cap < 1 then return redis.error_reply('ERR fair_weight: bad audit cap') end
if w == 1 then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], w) end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', cap, '*', unpack(ARGV, 4))
return w
