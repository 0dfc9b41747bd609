-- The live workers' entries, after deleting those whose time is up (Backend.workers).
--
--   KEYS[1]  live_workers        HASH worker id -> "<last seen ms>|<packed entry>"
--   KEYS[2]  live_worker_expiry  ZSET worker id -> expiry ms
--
-- Reply: the stored values of the live entries, by id.

--@include "lib/now_ms"
--@include "lib/prune_workers"

--@keys
local now = now_ms()
prune_workers(K, now)
local ids = redis.call('ZRANGEBYSCORE', K.live_worker_expiry, '(' .. now, '+inf')
table.sort(ids)
if #ids == 0 then
  return {}
end
return redis.call('HMGET', K.live_workers, unpack(ids))
