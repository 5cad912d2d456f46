-- The figures of one queue at one moment (read-only): per stream its length, waiting and
-- pending entries, consumers, last delivered id, Redis's own lag, oldest pending id, and its
-- retry set; then the schedule and the dead letters.
-- Waiting = entries after the group's last delivered id, counted as the length less the
-- entries up to it (those in flight, and finished jobs the trim has not removed yet: few, so
-- counting them here, without returning them, is cheap). The group's lag is not used for it:
-- Redis 7.0 reports it as null, or plainly wrong, once waiting entries were deleted.
-- KEYS: stream high/normal/low, retry high/normal/low, schedule, dead-letter stream, counts.
-- ARGV: group, most delivered entries to count per stream.
-- Returns {now, then per stream {length, waiting (-1: more delivered entries than counted),
--          pending, consumers, last id or '', lag or -1, oldest pending or '', retrying,
--          next retry ms or -1, jobs staged on a fair queue}, scheduled, next scheduled ms or -1, dead,
--          {expired, cancelled, held}}.
local group, cap = ARGV[1], tonumber(ARGV[2])
local out = {now_ms()}

local function first_score(key)
  local z = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return z[2] and tonumber(z[2]) or -1
end

for p = 1, 3 do
  local stream = KEYS[p]
  local length = redis.call('XLEN', stream)
  local pending, consumers, last, lag = 0, 0, nil, -1
  local info = redis.pcall('XINFO', 'GROUPS', stream)
  if type(info) == 'table' and not info.err then
    for _, g in ipairs(info) do
      local f = {}
      for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
      if f['name'] == group then
        pending, consumers, last = f['pending'], f['consumers'], f['last-delivered-id']
        if type(f['lag']) == 'number' then lag = f['lag'] end
      end
    end
  end
  local waiting, oldest = length, ''
  if last then
    local delivered = #redis.call('XRANGE', stream, '-', last, 'COUNT', pending + cap)
    waiting = delivered < pending + cap and math.max(0, length - delivered) or -1
    if pending > 0 then oldest = redis.call('XPENDING', stream, group)[2] end
  end
  -- A fair queue's staged jobs (docs/fairness.md) wait too, out of the stream.
  local queue, priority = string.match(stream, '^(.*):([^:]*)$')
  local staged_key = queue .. ':fair:' .. priority .. ':staged'
  local staged = tonumber(redis.call('GET', staged_key)) or 0
  out[#out + 1] = {length, waiting, pending, consumers, last or '', lag, oldest,
    redis.call('ZCARD', KEYS[3 + p]), first_score(KEYS[3 + p]), math.max(0, staged)}
end
out[#out + 1] = redis.call('ZCARD', KEYS[7])
out[#out + 1] = first_score(KEYS[7])
out[#out + 1] = redis.call('XLEN', KEYS[8])
out[#out + 1] = redis.call('HMGET', KEYS[9], 'expired', 'cancelled', 'held')
return out
