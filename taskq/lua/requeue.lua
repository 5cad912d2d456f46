-- Hand a pending entry back as a fresh entry (new body), acking and deleting the old one.
-- KEYS: source stream, destination stream, failures hash.
-- ARGV: group, entry id, owner ('' = any), task, body.
-- Returns the new entry id, or 0 if the entry is no longer pending under `owner`.
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(p) ~= 'table' or p.err or not p[1] then return 0 end
if ARGV[3] ~= '' and p[1][2] ~= ARGV[3] then return 0 end
local id = redis.call('XADD', KEYS[2], '*', 'task', ARGV[4], 'body', ARGV[5])
local old = KEYS[1] .. ' ' .. ARGV[2]
local first = redis.call('HGET', KEYS[3], old)
if first then
  redis.call('HDEL', KEYS[3], old)
  redis.call('HSET', KEYS[3], KEYS[2] .. ' ' .. id, first)
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return id
