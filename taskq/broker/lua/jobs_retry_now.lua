-- Make a batch of delayed jobs or retries due now, in one step: each member still in the set
-- gets the Redis clock as its score (a gone member is skipped, so a second click does
-- nothing), its record's due time follows, and the queue's due key is lowered so that the
-- masters' housekeeping (promote.lua) moves it into its stream on its next round. The job
-- stays in exactly one place throughout: the set, until promote moves it.
-- KEYS: the schedule or a retry set, the queue's due key.
-- ARGV: kind ('schedule' or 'retry'), then members.
-- A record is named after the due key (the queue's prefix, so the same slot).
-- Returns how many members were made due.
local kind = ARGV[1]
local prefix = string.match(KEYS[2], '^(.*):due$')
if not prefix then return redis.error_reply('ERR jobs_retry_now: not a due key') end
local now, moved = now_ms(), 0
for i = 2, #ARGV do
  local m = ARGV[i]
  if redis.call('ZADD', KEYS[1], 'XX', 'CH', now, m) == 1 or redis.call('ZSCORE', KEYS[1], m) then
    moved = moved + 1
    local rest = kind == 'retry' and (string.match(m, '^[^\n]*\n(.*)$') or '') or m
    local job = body_job_id(string.match(rest, '^%d\n[^\n]*\n(.*)$') or '')
    if job then
      local rec = prefix .. ':job:' .. job
      if redis.call('HGET', rec, 'state') == (kind == 'retry' and 'retrying' or 'scheduled') then
        redis.call('HSET', rec, 'due_ms', now)
      end
    end
  end
end
if moved > 0 then lower_due(KEYS[2], now) end
return moved
