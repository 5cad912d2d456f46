-- Delete the finished jobs at the head of these streams (the fetch's trim, for a fetch that
-- reads without a script: sent in the same write, after its acks).
-- KEYS: streams.  ARGV: group.
-- Returns the number of entries deleted.
local n = 0
for _, stream in ipairs(KEYS) do n = n + trim_finished(stream, ARGV[1]) end
return n
