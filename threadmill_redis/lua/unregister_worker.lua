-- Delete a live worker's entry (Backend.unregister_worker).
--
--   KEYS[1]  live_workers        HASH worker id -> "<last seen ms>|<packed entry>"
--   KEYS[2]  live_worker_expiry  ZSET worker id -> expiry ms
--   ARGV[1]  id        the worker's id
--
-- Reply: 1 if a live entry was deleted, else 0: an entry whose time is up
-- (one the pruning, bounded to 100 a call, has not reached yet) is deleted
-- too, and answers 0, as for a worker the pruning had deleted.

--@include "lib/now_ms"
--@include "lib/prune_workers"

--@keys
local now = now_ms()
prune_workers(K, now)
local expiry = redis.call('ZSCORE', K.live_worker_expiry, ARGV[1])
redis.call('ZREM', K.live_worker_expiry, ARGV[1])
local deleted = redis.call('HDEL', K.live_workers, ARGV[1])
if expiry and tonumber(expiry) > now then
  return deleted
end
return 0
