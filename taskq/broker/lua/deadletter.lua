-- Move a pending entry to the dead-letter stream, acking and deleting it at the source.
-- KEYS: stream, dead-letter stream.
-- ARGV: group, entry id, owner, first failure ms ('' for now), then field/value pairs.
-- Returns the dead entry id, or 0 if the entry is no longer pending under `owner`.
if (#ARGV - 4) % 2 ~= 0 then
  return redis.error_reply('ERR deadletter: fields must come in pairs')
end
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local now = now_ms()
local first = ARGV[4] ~= '' and ARGV[4] or now
local id = redis.call('XADD', KEYS[2], '*', 'first_failure_ms', first, 'last_failure_ms', now,
  unpack(ARGV, 5))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return id
