--@include "lib/enter_ready"
--@include "lib/index_task"
--@include "lib/mark_finished"
--@include "lib/save_task"
--@include "lib/unindex_task"
--@include "lib/without_last_worker"

-- Undo the claim RUNNING task `t` (as loaded) is under, as if it never
-- happened: the tail of READY (or DEFERRED due at `due_ms`, when given),
-- attempts - 1, the claim's worker id dropped, started_at and
-- last_attempted_at cleared when no attempt is left, no token. Errors,
-- run_after (unless deferred) and the payload stay. A task with a cancel
-- request (K.cancel_requests) has its claim undone the same way but is
-- finalized CANCELLED at `now` instead of going back. Returns whether it
-- was; else the caller wakes the queue's workers.
local function give_back(K, t, due_ms, now)
  local requested = redis.call('HEXISTS', K.cancel_requests, t.id) == 1
  unindex_task(K, t)
  if requested then
    mark_finished(t, 'CANCELLED', now)
  elseif due_ms == nil then
    enter_ready(K, t)
  else
    t.status = 'DEFERRED'
    t.run_after = due_ms
    t.sort = due_ms
  end
  t.deadline = nil
  t.token = nil
  t.attempts = math.max(t.attempts - 1, 0)
  if t.attempts == 0 then
    t.started_at = nil
    t.last_attempted_at = nil
  end
  local workers = redis.call('HGET', K.workers, t.id)
  if workers then
    local kept = without_last_worker(workers)
    if kept == '' then
      redis.call('HDEL', K.workers, t.id)
    else
      redis.call('HSET', K.workers, t.id, kept)
    end
  end
  save_task(K, t)
  index_task(K, t)
  return requested
end
