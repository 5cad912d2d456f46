-- Shared prologue of the scripts that move one pending entry: the fence.
-- owned(stream, group, id, owner): true if the entry is still pending under `owner`, so a
-- worker that lost the job (to the sweep, or to a FLUSHALL) cannot move it.
local function owned(stream, group, id, owner)
  local p = redis.pcall('XPENDING', stream, group, id, id, 1)
  return type(p) == 'table' and not p.err and p[1] ~= nil and p[1][2] == owner
end
