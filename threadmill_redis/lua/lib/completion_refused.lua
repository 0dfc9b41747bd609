--@include "lib/code"

-- What a completion of task `t` (nil if unknown) under lease `token` is
-- answered without changing anything, or nil when it applies: REPEAT when
-- this token already finalized it (a repeat after a lost reply), REFUSED
-- when the token is not current or the task is not RUNNING.
local function completion_refused(t, token)
  if t == nil or t.token ~= token then
    return code('REFUSED')
  end
  if t.status == 'SUCCESSFUL' or t.status == 'FAILED' then
    return code('REPEAT')
  end
  if t.status ~= 'RUNNING' then
    return code('REFUSED')
  end
  return nil
end
