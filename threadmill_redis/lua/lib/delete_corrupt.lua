--@include "lib/corrupt_queue"
--@include "lib/member_queue"
--@include "lib/timed_member"

-- Delete task `id`, whose stored state is corrupt (`raw`; false when missing),
-- and everything stored for it, as lib/delete_task does a valid one: from the
-- time indexes, and from the segment view `view` as `member` when the caller
-- found it there; else from the terminal views, when its state still names
-- its queue and the finished index its finished time. Every script that
-- calls it declares K.starts, K.progress and
-- K.cancel_requests.
local function delete_corrupt(K, id, raw, view, member)
  local queue = corrupt_queue(raw)
  if member ~= nil then
    redis.call('ZREM', view, member)
    queue = member_queue(member)
  elseif queue ~= nil then
    local finished = redis.call('ZSCORE', K.finished, id)
    if finished then
      local held = timed_member(queue, tonumber(finished), id)
      for _, terminal in ipairs({ K.successful, K.failed, K.cancelled }) do
        redis.call('ZREM', terminal, held)
      end
    end
  end
  for _, index in ipairs({ K.due, K.leases, K.finished }) do
    redis.call('ZREM', index, id)
  end
  for _, hash in ipairs({ K.payload, K.state, K.errors, K.workers, K.result, K.starts, K.progress,
    K.cancel_requests }) do
    redis.call('HDEL', hash, id)
  end
  if queue ~= nil and redis.call('HINCRBY', K.queues, queue, -1) <= 0 then
    redis.call('HDEL', K.queues, queue)
  end
end
