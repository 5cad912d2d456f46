-- Move a pending entry to the dead-letter stream, acking and deleting it at the source (and
-- end the job's status record as failed, if it keeps one, and run the workflow writes its
-- failure causes: later steps fail, error callbacks start, its chord fails).
-- KEYS: stream, dead-letter stream[, record, done list], then every key the ops touch.
-- ARGV: group, entry id, owner, first failure ms ('' for now), ttl ms ('' if no record),
--       ops (msgpack, or ''), then field/value pairs of the dead-letter entry.
-- Returns the dead entry id, or 0 if the entry is no longer pending under `owner`.
if (#ARGV - 6) % 2 ~= 0 then
  return redis.error_reply('ERR deadletter: fields must come in pairs')
end
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local now = now_ms()
local first = ARGV[4] ~= '' and ARGV[4] or now
local id = redis.call('XADD', KEYS[2], '*', 'first_failure_ms', first, 'last_failure_ms', now,
  unpack(ARGV, 7))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
local ended = 1
if ARGV[5] ~= '' then
  local f = {}
  for i = 7, #ARGV, 2 do f[ARGV[i]] = ARGV[i + 1] end
  record_attempt(KEYS[3], f['attempts'], f['error_type'], f['error'], f['traceback'],
    ARGV[3], now)
  ended = finish_record(KEYS[3], KEYS[4], 'failed', tonumber(ARGV[5]), now,
    'attempts', f['attempts'])
end
if ended == 1 and ARGV[6] ~= '' then run_ops(cmsgpack.unpack(ARGV[6]), now) end
return id
