--@include "lib/code"
--@include "lib/decision_refused"
--@include "lib/enter_ready"
--@include "lib/index_task"
--@include "lib/mark_finished"
--@include "lib/save_task"
--@include "lib/unindex_task"

-- The statuses a retry leaves a task in (CANCELLED: it had a cancel request).
local RETRIED = { READY = true, DEFERRED = true, CANCELLED = true }

-- Send RUNNING task `t` (nil if unknown) back under lease `token`: to the
-- tail of READY when `delay_ms` is 0, else to DEFERRED due at now + delay_ms;
-- the encoded `errors` replace the stored ones. A task with a cancel request
-- (K.cancel_requests) does not go back: it is finalized CANCELLED at `now`,
-- its token kept (so a repeat is recognised). Returns OK; REPEAT when this
-- token already decided it and it still waits (READY or DEFERRED) or was
-- finalized CANCELLED; REFUSED otherwise.
local function retry_task(K, t, token, delay_ms, errors, now)
  local refused = decision_refused(t, token, RETRIED)
  if refused ~= nil then
    return refused
  end
  local requested = redis.call('HEXISTS', K.cancel_requests, t.id) == 1
  unindex_task(K, t)
  t.deadline = nil
  redis.call('HSET', K.errors, t.id, errors)
  if requested then
    mark_finished(t, 'CANCELLED', now)
  elseif delay_ms == 0 then
    enter_ready(K, t)
  else
    t.status = 'DEFERRED'
    t.run_after = now + delay_ms
    t.sort = t.run_after
  end
  save_task(K, t)
  index_task(K, t)
  return code('OK')
end
