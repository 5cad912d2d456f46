-- A worker took a job that keeps a status record, through a read that ran outside fetch.lua
-- (the pipelined one-job read, or the blocking read of an idle worker).
-- KEYS: the records.  ARGV: consumer.
local now = now_ms()
for _, rec in ipairs(KEYS) do mark_running(rec, ARGV[1], now) end
return #KEYS
