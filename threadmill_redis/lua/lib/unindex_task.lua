--@include "lib/segment_member"

-- Remove task `t` (as loaded, before any change) from every index index_task put it in.
local function unindex_task(K, t)
  redis.call('ZREM', K[string.lower(t.status)], segment_member(t))
  if t.status == 'DEFERRED' then
    redis.call('ZREM', K.due, t.id)
  elseif t.status == 'RUNNING' then
    redis.call('ZREM', K.leases, t.id)
  elseif t.status ~= 'READY' then
    redis.call('ZREM', K.finished, t.id)
  end
end
