-- Delete consumers that left: no pending entries and idle for at least ARGV[2] ms.
-- XGROUP DELCONSUMER drops a consumer's pending entries, so the pending == 0 check and the
-- delete happen in one atomic step.
-- KEYS: streams.  ARGV: group, min idle ms, only this name ('' = any), names that must stay...
-- Returns the number of consumers deleted.
local keep = {}
for i = 4, #ARGV do keep[ARGV[i]] = true end
local n = 0
for _, key in ipairs(KEYS) do
  local cs = redis.pcall('XINFO', 'CONSUMERS', key, ARGV[1])
  if type(cs) == 'table' and not cs.err then
    for _, c in ipairs(cs) do
      local info = {}
      for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
      local wanted = ARGV[3] == '' or ARGV[3] == info.name
      if wanted and info.pending == 0 and info.idle >= tonumber(ARGV[2]) and not keep[info.name] then
        redis.call('XGROUP', 'DELCONSUMER', key, ARGV[1], info.name)
        n = n + 1
      end
    end
  end
end
return n
