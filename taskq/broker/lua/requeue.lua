-- Hand a pending entry back as a fresh entry at the end of its stream, acking and deleting
-- the old one; its failure record follows it.
-- KEYS: stream, failures hash.  ARGV: group, entry id, owner, task, body.
-- Returns the new entry id, or 0 if the entry is no longer pending under `owner`.
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local id = redis.call('XADD', KEYS[1], '*', 'task', ARGV[4], 'body', ARGV[5])
local old = KEYS[1] .. ' ' .. ARGV[2]
local first = redis.call('HGET', KEYS[2], old)
if first then
  redis.call('HDEL', KEYS[2], old)
  redis.call('HSET', KEYS[2], KEYS[1] .. ' ' .. id, first)
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return id
