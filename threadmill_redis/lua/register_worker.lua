-- Store a live worker's entry, seen now, for ttl_ms (Backend.register_worker).
--
--   KEYS[1]  live_workers        HASH worker id -> "<last seen ms>|<packed entry>"
--   KEYS[2]  live_worker_expiry  ZSET worker id -> expiry ms
--   ARGV[1]  id        the worker's id
--   ARGV[2]  packed    its entry (JSON text from threadmill_core.live_workers; never read here)
--   ARGV[3]  ttl_ms    how long the entry lives without another registration
--
-- Reply: the server's clock (ms) the entry was stored at.

--@include "lib/now_ms"
--@include "lib/prune_workers"

--@keys
local now, text = now_ms()
prune_workers(K, now)
redis.call('HSET', K.live_workers, ARGV[1], text .. '|' .. ARGV[2])
redis.call('ZADD', K.live_worker_expiry, now + tonumber(ARGV[3]), ARGV[1])
return now
