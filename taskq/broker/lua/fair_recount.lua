-- The top of a fair queue's waiting keys made exact (docs/fairness.md, "Seeing it"):
-- admitting takes nothing off a key's score, which only bounds its staged jobs from above,
-- so a fair worker's master sets the highest scored keys' scores to their staged jobs (their
-- lists' lengths, every priority) now and then, and removes a key with none. Readers count
-- a key's jobs from its lists themselves; the scores only rank the keys for the top ones.
-- KEYS: waiting keys, a stream of the queue (the lists are named from it).
-- ARGV: how many keys (the highest scored).
-- Returns how many keys it looked at.
local n = tonumber(ARGV[1])
if not n or n < 1 or n ~= math.floor(n) then
  return redis.error_reply('ERR fair_recount: bad count')
end
local names = fair_names(KEYS[2])
if names.waiting ~= KEYS[1] then return redis.error_reply('ERR fair_recount: not its queue') end
local top = redis.pcall('ZRANGE', KEYS[1], 0, n - 1, 'REV')
if type(top) ~= 'table' or top.err then return 0 end  -- (not a sorted set)
local scored, gone = {}, {}
for _, key in ipairs(top) do
  local staged = fair_key_ok(key) and fair_staged_jobs(names, key) or 0
  if staged > 0 then
    scored[#scored + 1], scored[#scored + 2] = staged, key
  else
    gone[#gone + 1] = key
  end
end
if #scored > 0 then redis.call('ZADD', KEYS[1], 'XX', unpack(scored)) end
if #gone > 0 then redis.call('ZREM', KEYS[1], unpack(gone)) end
return #top
