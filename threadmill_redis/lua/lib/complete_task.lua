--@include "lib/code"
--@include "lib/decision_refused"
--@include "lib/index_task"
--@include "lib/mark_finished"
--@include "lib/save_task"
--@include "lib/unindex_task"

-- The statuses a completion leaves a task in (what lib/decision_refused
-- reads as a repeat of it).
local COMPLETED = { SUCCESSFUL = true, FAILED = true, CANCELLED = true }

-- Finalize RUNNING task `t` (nil if unknown) as `status` (SUCCESSFUL, FAILED
-- or CANCELLED) under lease `token`, storing the encoded `errors` and
-- `result` ('' for none); its progress and cancel request stay. Returns OK,
-- or what decision_refused answers.
local function complete_task(K, t, token, status, errors, result, now)
  local refused = decision_refused(t, token, COMPLETED)
  if refused then
    return refused
  end
  unindex_task(K, t)
  mark_finished(t, status, now)
  redis.call('HSET', K.errors, t.id, errors)
  -- A RUNNING task holds no result (only this function stores one, and the
  -- task is then terminal; requeue, the one way back, deletes it).
  if result ~= '' then
    redis.call('HSET', K.result, t.id, result)
  end
  save_task(K, t)
  index_task(K, t)
  return code('OK')
end
