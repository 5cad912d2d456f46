-- taskq fair off (docs/fairness.md): move a fair queue's staged jobs into their streams as
-- plain entries, a batch per call, taking the keys in turn (oldest first within a key). The
-- first call clears the mark, so producers stop staging; the last ('finish') drops the
-- turns, waiting and staged counts and last admitted ids, which no plain worker keeps.
-- KEYS: fair mode, waiting keys, the streams (high, normal, low), the turns (same order).
-- ARGV: 'move' or 'finish', the first key's rank in the waiting keys, keys per call, most
--       jobs per call.
-- Returns {jobs moved, the next call's rank (-1: every key was looked at)}.
redis.call('DEL', KEYS[1])
if ARGV[1] == 'finish' then
  redis.call('DEL', KEYS[2], KEYS[6], KEYS[7], KEYS[8])
  for p = 3, 5 do
    local names = fair_names(KEYS[p])
    redis.call('DEL', names.staged_count, names.last)
  end
  return {0, -1}
end
local from, nkeys, budget = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if not from or not nkeys or not budget or nkeys < 1 or budget < 1 then
  return redis.error_reply('ERR fair_off: bad arguments')
end
local keys = redis.call('ZRANGE', KEYS[2], from, from + nkeys - 1)
local moved = 0
for p = 1, 3 do
  local stream = KEYS[2 + p]
  local live = {}
  for _, key in ipairs(keys) do
    if fair_key_ok(key) then live[#live + 1] = fair_names(stream).staged .. key end
  end
  while #live > 0 do
    local still = {}
    for _, list in ipairs(live) do
      if moved >= budget then return {moved, from} end
      local raw = redis.call('LPOP', list)
      if raw then
        redis.call('INCRBY', fair_names(stream).staged_count, -1)
        local f = fair_fields(raw)
        if f then
          fair_enter(stream, f, nil)
          moved = moved + 1
        end
        still[#still + 1] = list
      end
    end
    live = still
  end
end
if #keys < nkeys then return {moved, -1} end
return {moved, from + #keys}
