--@include "lib/unindex_task"

-- Delete task `t` and everything stored for it; forget its queue once empty.
local function delete_task(K, t)
  unindex_task(K, t)
  for _, hash in ipairs({ K.payload, K.state, K.errors, K.workers, K.result }) do
    redis.call('HDEL', hash, t.id)
  end
  if redis.call('HINCRBY', K.queues, t.queue, -1) <= 0 then
    redis.call('HDEL', K.queues, t.queue)
  end
end
