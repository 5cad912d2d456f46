-- Shared prologue: the server's clock in ms. Due times, lease ages and failure times come
-- from Redis, never from the caller, so a worker or producer with a wrong clock cannot make
-- a job due too early or too late for everyone else (scripts replicate their effects, so a
-- script may read TIME before it writes).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
