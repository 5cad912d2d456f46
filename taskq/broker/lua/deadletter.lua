-- Move a pending entry to the dead-letter stream, acking and deleting it at the source.
-- KEYS: stream, retry zset, failures hash, dead-letter stream.
-- ARGV: group, entry id, owner, then field/value pairs for the dead entry.
-- Returns the dead entry id, or 0 if the entry is no longer pending under `owner`.
if (#ARGV - 3) % 2 ~= 0 then
  return redis.error_reply('ERR dead_letter: fields must come in pairs')
end
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local now = now_ms()
local fkey = KEYS[1] .. ' ' .. ARGV[2]
local first = redis.call('HGET', KEYS[3], fkey) or now
local id = redis.call('XADD', KEYS[4], '*', 'first_failure_ms', first, 'last_failure_ms', now,
  unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[3], fkey)
redis.call('ZREM', KEYS[2], ARGV[2])
return id
