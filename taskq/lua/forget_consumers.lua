-- Delete consumers that left: no pending entries and idle for longer than ARGV[2] ms.
-- XGROUP DELCONSUMER drops a consumer's pending entries, so the pending == 0 check and the
-- delete happen in one atomic step.
-- KEYS: streams.  ARGV: group, min idle ms, names that must stay...
local keep = {}
for i = 3, #ARGV do keep[ARGV[i]] = true end
local n = 0
for _, key in ipairs(KEYS) do
  local cs = redis.pcall('XINFO', 'CONSUMERS', key, ARGV[1])
  if type(cs) == 'table' and not cs.err then
    for _, c in ipairs(cs) do
      local info = {}
      for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
      if info.pending == 0 and info.idle > tonumber(ARGV[2]) and not keep[info.name] then
        redis.call('XGROUP', 'DELCONSUMER', key, ARGV[1], info.name)
        n = n + 1
      end
    end
  end
end
return n
