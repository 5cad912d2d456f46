-- A master marks the jobs its children run, of those that keep a status record, as running:
-- with the worker and the start (ms before now). The fetch does not mark them (it would cost
-- every job a write); until its master has, a job taken reads as running from its pending
-- entry (Records.status). Only a record still 'waiting' changes: the job may have ended, or
-- gone back, since the master looked.
-- KEYS: the records.  ARGV: per record, its consumer and the ms since its run started.
-- Returns how many were marked.
local now, n = now_ms(), 0
for i, rec in ipairs(KEYS) do
  if redis.call('HGET', rec, 'state') == 'waiting' then
    redis.call('HSET', rec, 'state', 'running', 'worker', ARGV[2 * i - 1],
      'started_ms', now - tonumber(ARGV[2 * i]))
    n = n + 1
  end
end
return n
