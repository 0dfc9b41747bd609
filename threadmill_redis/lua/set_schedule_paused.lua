-- Store a schedule's pause state as of the server's clock (Backend.set_schedule_paused).
--
--   KEYS[1]  schedules   HASH name -> "<1 paused, 0 not>|<since, server ms>"
--   ARGV[1]  name        the schedule
--   ARGV[2]  paused      "1" to pause, "0" to resume
--
-- Reply: the stored value; the one already stored when it has that flag (no change).

--@include "lib/now_ms"

--@keys
local known = redis.call('HGET', K.schedules, ARGV[1])
if known and string.sub(known, 1, 1) == ARGV[2] then
  return known
end
local _, ms = now_ms()
local value = ARGV[2] .. '|' .. ms
redis.call('HSET', K.schedules, ARGV[1], value)
return value
