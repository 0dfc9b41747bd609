--@include "lib/unindex_task"

-- Delete task `t` and everything stored for it (what K.starts holds too); forget
-- its queue once empty. Every script that calls it declares K.starts.
local function delete_task(K, t)
  unindex_task(K, t)
  for _, hash in ipairs({ K.payload, K.state, K.errors, K.workers, K.result, K.starts }) do
    redis.call('HDEL', hash, t.id)
  end
  if redis.call('HINCRBY', K.queues, t.queue, -1) <= 0 then
    redis.call('HDEL', K.queues, t.queue)
  end
end
