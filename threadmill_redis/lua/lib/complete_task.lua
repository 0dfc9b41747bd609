--@include "lib/code"
--@include "lib/index_task"
--@include "lib/save_task"
--@include "lib/unindex_task"

-- Finalize RUNNING task `t` (nil if unknown) as `status` (SUCCESSFUL or
-- FAILED) under lease `token`, storing the encoded `errors` and `result`
-- ('' for none). Returns OK; REPEAT when this token already finalized it (a
-- repeat after a lost reply: nothing changes); REFUSED otherwise. The token
-- is kept, which is what lets a repeat be recognised.
local function complete_task(K, t, token, status, errors, result, now)
  if t == nil or t.token ~= token then
    return code('REFUSED')
  end
  if t.status == 'SUCCESSFUL' or t.status == 'FAILED' then
    return code('REPEAT')
  end
  if t.status ~= 'RUNNING' then
    return code('REFUSED')
  end
  unindex_task(K, t)
  t.status = status
  t.finished_at = now
  t.sort = now
  t.deadline = nil
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
