-- Read how long until the earliest DEFERRED task of any queue falls due on
-- the server's clock: the maintenance loop plans its next pass with it.
-- Read-only; the clock is read only when something is deferred, so an idle
-- namespace costs one ZRANGE.
--
--   KEYS[1]  due         ZSET DEFERRED ids by run_after ms
--
-- Reply: nil when no task is DEFERRED; else the milliseconds until the
-- earliest falls due, 0 when it is due already (never negative).

--@include "lib/now_ms"

--@keys

local first = redis.call('ZRANGE', K.due, 0, 0, 'WITHSCORES')
if #first == 0 then
  return false
end
return math.max(tonumber(first[2]) - now_ms(), 0)
