--@include "lib/load_task"
--@include "lib/delete_corrupt"
--@include "lib/delete_task"

-- Delete up to `batch` terminal tasks whose results outlived `ttl_ms`, oldest
-- first. Scripts that finish tasks call it, so memory stays bounded under
-- steady load without a key TTL (which eviction could not tell from a lease).
local function prune_expired(K, now, ttl_ms, batch)
  local ids = redis.call('ZRANGEBYSCORE', K.finished, '-inf', now - ttl_ms, 'LIMIT', 0, batch)
  for _, id in ipairs(ids) do
    local t, corrupt = load_task(K, id)
    if t then
      delete_task(K, t)
    else -- a corrupt record, or an entry without one
      delete_corrupt(K, id, corrupt, nil, nil)
    end
  end
  return #ids
end
