--@include "lib/index_task"
--@include "lib/save_task"

-- Move READY task `t` to RUNNING as a worker's attempt under `token` (fresh,
-- from the caller's one HINCRBY for the whole batch): lease deadline,
-- attempts + 1, timestamps, and the worker appended to its ids
-- (`worker_entry` arrives already encoded by Python). The caller has already
-- taken it out of the READY view (one ZREM for the batch). Returns the
-- task's worker ids as stored.
local function claim_task(K, t, now, lease_ms, worker_entry, token)
  t.status = 'RUNNING'
  t.token = token
  t.deadline = now + lease_ms
  t.sort = t.deadline
  t.attempts = t.attempts + 1
  t.last_attempted_at = now
  if t.started_at == nil then
    t.started_at = now
  end
  local workers = (redis.call('HGET', K.workers, t.id) or '') .. worker_entry
  redis.call('HSET', K.workers, t.id, workers)
  save_task(K, t)
  index_task(K, t)
  return workers
end
