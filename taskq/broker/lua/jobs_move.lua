-- Move a batch of waiting entries to another priority's stream of the same queue, in one
-- step: each entry still undelivered is added to the other stream with its fields and
-- deleted from its own, so it is never in both and never in neither; its record follows
-- (entry, priority). A delivered or gone entry is skipped, so a second click does nothing.
-- KEYS: the source stream, the destination stream.
-- ARGV: group, destination priority, then entry ids.
-- Returns how many entries moved.
local group, priority = ARGV[1], ARGV[2]
if KEYS[1] == KEYS[2] then return 0 end
local cursor = last_delivered(KEYS[1], group) or '0-0'
local moved = 0
for i = 3, #ARGV do
  local ref = ARGV[i]
  local row = string.match(ref, '^%d+%-%d+$') and id_before(cursor, ref)
    and redis.call('XRANGE', KEYS[1], ref, ref)[1]
  if row then
    -- (a copy is a plain entry: it goes without 'fk')
    local id = redis.call('XADD', KEYS[2], '*', unpack(without_fair_key(row[2])))
    redis.call('XDEL', KEYS[1], ref)
    moved = moved + 1
    for j = 1, #row[2], 2 do
      if row[2][j] == 'job' then
        local rec = record_key(KEYS[1], row[2][j + 1])
        if redis.call('HGET', rec, 'entry') == ref then
          redis.call('HSET', rec, 'entry', id, 'priority', priority)
        end
      end
    end
  end
end
return moved
