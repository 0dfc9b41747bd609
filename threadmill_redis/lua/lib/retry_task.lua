--@include "lib/code"
--@include "lib/decision_refused"
--@include "lib/enter_ready"
--@include "lib/index_task"
--@include "lib/save_task"
--@include "lib/unindex_task"

-- Send RUNNING task `t` (nil if unknown) back under lease `token`: to the
-- tail of READY when `delay_ms` is 0, else to DEFERRED due at now + delay_ms;
-- the encoded `errors` replace the stored ones. Returns OK; REPEAT when this
-- token already sent it back and it still waits (READY or DEFERRED); REFUSED
-- otherwise.
local function retry_task(K, t, token, delay_ms, errors, now)
  local refused = decision_refused(t, token, 'READY', 'DEFERRED')
  if refused ~= nil then
    return refused
  end
  unindex_task(K, t)
  t.deadline = nil
  redis.call('HSET', K.errors, t.id, errors)
  if delay_ms == 0 then
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
