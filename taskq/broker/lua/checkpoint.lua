-- Write fields of a job's steps hash for the run that holds the job: a step's state and
-- value, an iteration's cursor. Fenced: only while the job's entry is pending under `owner`,
-- so a run that lost its lease (its job taken back and run elsewhere) cannot overwrite what
-- the newer run stored.
-- KEYS: stream, steps hash.
-- ARGV: group, entry id, owner, ttl ms, value field ('' to write unconditionally), then
--       field, value pairs.
-- Returns 0 if the entry is not pending under `owner`; with a value field, the stored value
-- if there is one (then nothing is written); else 1 once the pairs are written.
local ttl = tonumber(ARGV[4])
if not ttl or ttl <= 0 or ttl ~= ttl or #ARGV < 7 or (#ARGV - 5) % 2 ~= 0 then
  return redis.error_reply('ERR checkpoint: bad arguments')
end
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
if ARGV[5] ~= '' then
  local stored = redis.call('HGET', KEYS[2], ARGV[5])
  if stored then return stored end
end
redis.call('HSET', KEYS[2], unpack(ARGV, 6))
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
