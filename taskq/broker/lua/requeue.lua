-- Hand a pending entry back as a fresh entry at the end of its stream, acking and deleting
-- the old one (its first failure time follows it, and so does its status record).
-- KEYS: stream[, record].
-- ARGV: group, entry id, owner, task, body, first failure ms ('' if none), job id ('' if the
--       job keeps no record).
-- Returns the new entry id, or 0 if the entry is no longer pending under `owner`.
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local fields = {'task', ARGV[4], 'body', ARGV[5]}
if ARGV[7] ~= '' then
  fields[5], fields[6] = 'job', ARGV[7]
end
if ARGV[6] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'ff', ARGV[6]
end
local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
if KEYS[2] and redis.call('HSET', KEYS[2], 'state', 'waiting', 'entry', id) == 2 then
  redis.call('DEL', KEYS[2])  -- the record had expired
elseif KEYS[2] then
  redis.call('HDEL', KEYS[2], 'worker', 'started_ms')
end
return id
