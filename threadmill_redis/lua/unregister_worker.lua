-- Delete a live worker's entry (Backend.unregister_worker).
--
--   KEYS[1]  live_workers        HASH worker id -> "<last seen ms>|<packed entry>"
--   KEYS[2]  live_worker_expiry  ZSET worker id -> expiry ms
--   ARGV[1]  id        the worker's id
--
-- Reply: 1 if a live entry was deleted, else 0.

--@include "lib/now_ms"
--@include "lib/prune_workers"

--@keys
prune_workers(K, now_ms())
redis.call('ZREM', K.live_worker_expiry, ARGV[1])
return redis.call('HDEL', K.live_workers, ARGV[1])
