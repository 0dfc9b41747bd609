--@include "lib/code"
--@include "lib/decision_refused"
--@include "lib/enter_ready"
--@include "lib/index_task"
--@include "lib/mark_finished"
--@include "lib/save_task"
--@include "lib/unindex_task"

-- The statuses a retry leaves a task in, without a cancel request and with one.
local RETRIED = { READY = true, DEFERRED = true }
local RETRIED_CANCELLED = { CANCELLED = true }

-- Send RUNNING task `t` (nil if unknown) back under lease `token`: to the
-- tail of READY when `delay_ms` is 0, else to DEFERRED due at now + delay_ms;
-- the encoded `errors` replace the stored ones. A task with a cancel request
-- (K.cancel_requests) does not go back: it is finalized CANCELLED at `now`,
-- its token kept (so a repeat is recognised). Returns OK; REPEAT when this
-- token already sent it back and it still waits (READY or DEFERRED), or
-- finalized it CANCELLED; REFUSED otherwise.
local function retry_task(K, t, token, delay_ms, errors, now)
  local requested = t ~= nil and redis.call('HEXISTS', K.cancel_requests, t.id) == 1
  local refused = decision_refused(t, token, requested and RETRIED_CANCELLED or RETRIED)
  if refused ~= nil then
    return refused
  end
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
