--@include "lib/code"
--@include "lib/index_task"
--@include "lib/save_task"
--@include "lib/unindex_task"

-- Renew the lease `token` holds on task `t` (nil if unknown) to now + lease_ms.
-- Returns OK, or REFUSED when the token is not current or `t` is not RUNNING;
-- then, when renewed, the task's progress and cancel request (K.progress,
-- K.cancel_requests; false for none), which its holder learns this way.
local function extend_task(K, t, token, now, lease_ms)
  if t == nil or t.token ~= token or t.status ~= 'RUNNING' then
    return code('REFUSED'), false, false
  end
  unindex_task(K, t)
  t.deadline = now + lease_ms
  t.sort = t.deadline
  save_task(K, t)
  index_task(K, t)
  return code('OK'), redis.call('HGET', K.progress, t.id),
    redis.call('HGET', K.cancel_requests, t.id)
end
