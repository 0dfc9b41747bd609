-- Delete up to 100 live workers' entries whose time is up at `now` (ms): the
-- scripts of the entries call it first, so dead workers' entries never pile up.
local function prune_workers(K, now)
  local dead = redis.call('ZRANGEBYSCORE', K.live_worker_expiry, '-inf', now, 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('HDEL', K.live_workers, unpack(dead))
    redis.call('ZREM', K.live_worker_expiry, unpack(dead))
  end
end
