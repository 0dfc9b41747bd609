--@include "lib/unindex_task"

-- Delete task `t` and everything stored for it (what K.starts, K.progress and
-- K.cancel_requests hold too); forget
-- its queue once empty. Every script that calls it declares those.
local function delete_task(K, t)
  unindex_task(K, t)
  for _, hash in ipairs({ K.payload, K.state, K.errors, K.workers, K.result, K.starts, K.progress,
    K.cancel_requests }) do
    redis.call('HDEL', hash, t.id)
  end
  if redis.call('HINCRBY', K.queues, t.queue, -1) <= 0 then
    redis.call('HDEL', K.queues, t.queue)
  end
end
