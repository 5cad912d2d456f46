-- Delete finished jobs that the head trim cannot reach because an older job still runs (a
-- long job keeps every later entry from the head trim): entries between the oldest pending
-- one and the last delivered one that are not pending any more. Run by the sweeping master.
-- KEYS: stream.  ARGV: group, most entries to look at.
-- Returns the number of entries deleted.
local group, limit = ARGV[1], tonumber(ARGV[2])
local n = trim_finished(KEYS[1], group)
local last = last_delivered(KEYS[1], group)
if not last then return n end
local p = redis.call('XPENDING', KEYS[1], group)
if p[1] == 0 then return n end
local rows = redis.call('XRANGE', KEYS[1], p[2], last, 'COUNT', limit)
local pending = {}
for _, e in ipairs(redis.call('XPENDING', KEYS[1], group, p[2], last, limit)) do
  pending[e[1]] = true
end
local done = {'XDEL', KEYS[1]}
for _, e in ipairs(rows) do
  if not pending[e[1]] then done[#done + 1] = e[1] end
end
if #done > 2 then n = n + redis.call(unpack(done)) end
return n
