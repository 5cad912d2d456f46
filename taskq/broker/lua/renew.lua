-- Keep the leases of running jobs: reset the idle time of every entry pending under each
-- consumer, without bumping delivery counts (JUSTID). Entries owned by anyone else are untouched.
-- The pending list is read in pages, so a consumer may hold any number of entries.
-- KEYS: streams.  ARGV: group, consumer names...
-- Returns the number of entries renewed.
local PAGE = 1000
local n = 0
for _, key in ipairs(KEYS) do
  for c = 2, #ARGV do
    local start = '-'
    while true do
      local p = redis.pcall('XPENDING', key, ARGV[1], start, '+', PAGE, ARGV[c])
      if type(p) ~= 'table' or p.err or #p == 0 then break end
      -- (unpack() only spreads as the last argument, so JUSTID goes in the table too.)
      local claim = {'XCLAIM', key, ARGV[1], ARGV[c], 0}
      for _, e in ipairs(p) do claim[#claim + 1] = e[1] end
      claim[#claim + 1] = 'JUSTID'
      redis.call(unpack(claim))
      n = n + #p
      if #p < PAGE then break end
      start = '(' .. p[#p][1]
    end
  end
end
return n
