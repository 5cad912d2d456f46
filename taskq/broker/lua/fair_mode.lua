-- A worker starts on a queue (docs/fairness.md, "Turning it on and off"): one whose settings
-- name it fair marks it fair; one whose settings do not finds out whether jobs still wait
-- staged by fairness (admitted ones are stream entries any worker reads), and with none
-- clears the mark, so that producers that still name it fair stop staging where no fair
-- worker would admit.
-- KEYS: fair mode, waiting keys.
-- ARGV: 'on' (a fair worker) or 'plain'.
-- Returns how many keys have jobs waiting under fairness (the plain worker refuses then).
if ARGV[1] == 'on' then
  redis.call('SET', KEYS[1], 'on')
  return 0
end
local n = redis.call('ZCARD', KEYS[2])
if n == 0 then redis.call('DEL', KEYS[1]) end
return n
