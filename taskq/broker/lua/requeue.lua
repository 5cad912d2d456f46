-- Hand a pending entry back as a fresh entry at the end of its stream, acking and deleting
-- the old one (its first failure time follows it).
-- KEYS: stream.  ARGV: group, entry id, owner, task, body, first failure ms ('' if none).
-- Returns the new entry id, or 0 if the entry is no longer pending under `owner`.
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local id
if ARGV[6] ~= '' then
  id = redis.call('XADD', KEYS[1], '*', 'task', ARGV[4], 'body', ARGV[5], 'ff', ARGV[6])
else
  id = redis.call('XADD', KEYS[1], '*', 'task', ARGV[4], 'body', ARGV[5])
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return id
