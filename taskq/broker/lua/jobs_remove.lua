-- Remove a batch of jobs that no worker has taken from one place of a queue, in one step: a
-- waiting entry of a stream (only while it is still undelivered: a delivered one is running
-- and stays), or a member of the schedule or of a retry set. A job that keeps a status record
-- ends as cancelled (waiters wake), and its uniqueness lock goes with it. Re-running the batch
-- removes nothing twice (a gone entry or member is skipped).
-- KEYS: the stream or sorted set, the queue's counts hash.
-- ARGV: group, kind ('stream', 'schedule' or 'retry'), record ttl ms, counts field to add
--       the removed jobs to ('' for none), then entry ids or members.
-- A record and lock are named after the counts hash (the queue's prefix, so the same slot).
-- Returns {how many jobs were removed, then the refs handed back}.
local group, kind, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local prefix = string.match(KEYS[2], '^(.*):counts$')
if not prefix then return redis.error_reply('ERR jobs_remove: not a counts key') end
if not ttl or ttl < 1 then return redis.error_reply('ERR jobs_remove: bad ttl') end
local now, removed = now_ms(), 0
local cursor = kind == 'stream' and (last_delivered(KEYS[1], group) or '0-0') or nil

-- The job id of a set member ('<p>\n<task>\n<body>', after '<first failure ms>\n' in a retry
-- set), if the job keeps a record.
local function member_job(m)
  if kind == 'retry' then m = string.match(m, '^[^\n]*\n(.*)$') or '' end
  return body_job_id(string.match(m, '^%d\n[^\n]*\n(.*)$') or '')
end

-- Whether a recorded job needs cancel.lua (later workflow steps, a slot kept for it).
local function needs_cancel(job)
  if not job then return false end
  local rec = prefix .. ':job:' .. job
  local f = redis.call('HMGET', rec, 'later', 'slot_for')
  return (f[1] or f[2]) and true or false
end

-- Remove one entry or member; returns 'gone', 'handed back', or the removed job's id ('' if
-- it keeps no record).
local function take(ref)
  if kind ~= 'stream' then
    if not redis.call('ZSCORE', KEYS[1], ref) then return 'gone' end
    local job = member_job(ref)
    if needs_cancel(job) then return 'handed back' end
    redis.call('ZREM', KEYS[1], ref)
    return job or ''
  end
  if not (string.match(ref, '^%d+%-%d+$') and id_before(cursor, ref)) then return 'gone' end
  local row = redis.call('XRANGE', KEYS[1], ref, ref)[1]
  if not row then return 'gone' end
  local job
  for i = 1, #row[2], 2 do if row[2][i] == 'job' then job = row[2][i + 1] end end
  if needs_cancel(job) then return 'handed back' end
  redis.call('XDEL', KEYS[1], ref)
  return job or ''
end

local lock_head = prefix .. ':unique:'
local handed = {}
for i = 5, #ARGV do
  local job = take(ARGV[i])
  if job == 'handed back' then
    handed[#handed + 1] = ARGV[i]
  elseif job ~= 'gone' then
    removed = removed + 1
    if job ~= '' then
      local rec = prefix .. ':job:' .. job
      local lock = redis.call('HGET', rec, 'unique')
      if lock and string.sub(lock, 1, #lock_head) == lock_head and #lock > #lock_head
          and redis.call('GET', lock) == job then
        redis.call('DEL', lock)
      end
      if redis.call('EXISTS', rec) == 1 then
        finish_record(rec, prefix .. ':done:' .. job, 'cancelled', ttl, now)
      end
    end
  end
end
if removed > 0 and ARGV[4] ~= '' then redis.call('HINCRBY', KEYS[2], ARGV[4], removed) end
return {removed, unpack(handed)}
