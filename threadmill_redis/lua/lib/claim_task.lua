--@include "lib/index_task"
--@include "lib/new_token"
--@include "lib/save_task"
--@include "lib/unindex_task"

-- Move READY task `t` to RUNNING as a worker's attempt: fresh token, lease
-- deadline, attempts + 1, timestamps, and the worker appended to its ids
-- (`worker_entry` arrives already encoded by Python).
local function claim_task(K, t, now, lease_ms, worker_entry)
  unindex_task(K, t)
  t.status = 'RUNNING'
  t.token = new_token(K)
  t.deadline = now + lease_ms
  t.sort = t.deadline
  t.attempts = t.attempts + 1
  t.last_attempted_at = now
  if t.started_at == nil then
    t.started_at = now
  end
  local workers = redis.call('HGET', K.workers, t.id) or ''
  redis.call('HSET', K.workers, t.id, workers .. worker_entry)
  save_task(K, t)
  index_task(K, t)
end
