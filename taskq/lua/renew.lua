-- Keep the leases of running jobs: reset the idle time of every entry pending under each
-- consumer, without bumping delivery counts (JUSTID). Entries owned by anyone else are untouched.
-- KEYS: streams.  ARGV: group, consumer names...
-- Returns the number of entries renewed.
local n = 0
for _, key in ipairs(KEYS) do
  for c = 2, #ARGV do
    local p = redis.pcall('XPENDING', key, ARGV[1], '-', '+', 1000, ARGV[c])
    if type(p) == 'table' and not p.err and #p > 0 then
      local ids = {}
      for i, e in ipairs(p) do ids[i] = e[1] end
      redis.call('XCLAIM', key, ARGV[1], ARGV[c], 0, unpack(ids, 1, #ids), 'JUSTID')
      n = n + #ids
    end
  end
end
return n
