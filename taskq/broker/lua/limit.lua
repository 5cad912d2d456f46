-- Admit jobs of a rate-limited task, or defer them, in one step: one job, or the run of a
-- batch's jobs that share the task's limit and stream (taken in their order, so a backlog of
-- deferrals costs one call per batch, not one per job). The limit is a sliding window: at
-- most N starts in any W ms, kept as a sorted set of start slots (member: job id and
-- attempt, score: the slot's time), handed out in order and at least W/N apart, so a backlog
-- starts evenly rather than in bursts of N. A job over the limit gets the first free slot in
-- the future and waits for it in the schedule, out of its stream (so it blocks nobody behind
-- it), without using an attempt; back at its time, it holds its slot. Slots are W/N apart,
-- so of the jobs one call sees at most the first is admitted by a free slot; the others that
-- are admitted are jobs back at their slots.
-- KEYS: the limit's sorted set, stream, schedule, due key, then the jobs' records.
-- ARGV: group, owner, N, W ms, record ttl ms, then per job: entry id, slot member, schedule
--       member, index in KEYS of its record (0: none).
-- Returns per job 1 (run it now), 2 (deferred), or 0 (the entry is no longer the owner's).
local now = now_ms()
local key, n, window = KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local out, deferred, first, latest = {}, {}, nil, nil

-- The slot of a job not holding one: after the latest slot by W/N, and after the N-th latest
-- by W (the window then holds N); now if both are past.
local function next_slot()
  local slot = now
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then slot = math.max(slot, tonumber(last[2]) + window / n) end
  if redis.call('ZCARD', key) >= n then
    local nth = redis.call('ZRANGE', key, -n, -n, 'WITHSCORES')
    slot = math.max(slot, tonumber(nth[2]) + window)
  end
  return slot
end

for a = 6, #ARGV, 4 do
  local entry, member = ARGV[a], ARGV[a + 1]
  local verdict = 1
  if not redis.call('ZSCORE', key, member) then  -- held: back at (or after) its slot
    local slot = next_slot()
    if slot > now and not owned(KEYS[2], ARGV[1], entry, ARGV[2]) then
      verdict = 0
    else
      redis.call('ZADD', key, slot, member)
      latest = math.max(latest or slot, slot)
      if slot > now then
        verdict = 2
        redis.call('ZADD', KEYS[3], slot, ARGV[a + 2])
        deferred[#deferred + 1] = entry
        first = first or slot
        local rec = tonumber(ARGV[a + 3])
        if rec > 0 then
          redis.call('HSET', KEYS[rec], 'state', 'scheduled', 'due_ms', slot)
          redis.call('HDEL', KEYS[rec], 'worker', 'started_ms')
          redis.call('PEXPIRE', KEYS[rec], slot - now + tonumber(ARGV[5]))
        end
      end
    end
  end
  out[#out + 1] = verdict
end
if latest then redis.call('PEXPIRE', key, latest - now + window) end
if first then
  lower_due(KEYS[4], first)
  redis.call('XACK', KEYS[2], ARGV[1], unpack(deferred))
  redis.call('XDEL', KEYS[2], unpack(deferred))
end
return out
