--@include "lib/code"

-- What a decision on task `t` (nil if unknown) under lease `token` is
-- answered without changing anything, or nil when it applies: REPEAT when
-- this token already applied it, so `t` is in one of the statuses `done`
-- names (a set: the statuses the decision leaves a task in; a repeat after
-- a lost reply), REFUSED when the token is not current or the task is not
-- RUNNING. The fencing rule of every complete and retry.
local function decision_refused(t, token, done)
  if t == nil or t.token ~= token then
    return code('REFUSED')
  end
  if done[t.status] then
    return code('REPEAT')
  end
  if t.status ~= 'RUNNING' then
    return code('REFUSED')
  end
  return nil
end
