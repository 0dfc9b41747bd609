--@include "lib/layout"
--@include "lib/pack_number"

-- The packed state of READY task state `raw` once claimed at server time
-- `now_text` under `token` until `deadline_text` (all decimal text):
-- RUNNING, attempts + 1, sort and deadline at the lease's end, last
-- attempted now, started now unless started before, the token set. Also
-- returns the task's queue. Nil when `raw` is not a READY state of the
-- layout (corrupt: lib/parse_task's check, made by the same match).
-- Fast path: changes the fields of the string in place instead of a table
-- from lib/parse_task packed again by lib/pack_task (the plain twin, which
-- tests/redis/test_state_transforms.py holds it to).
local function claimed_state(raw, now_text, deadline_text, token)
  local f = { string.match(raw, STATE_PATTERN) }
  if f[STATE.status] ~= 'READY' then
    return nil
  end
  f[STATE.status] = 'RUNNING'
  f[STATE.attempts] = pack_number(tonumber(f[STATE.attempts]) + 1)
  f[STATE.sort] = deadline_text
  if f[STATE.started_at] == '' then
    f[STATE.started_at] = now_text
  end
  f[STATE.last_attempted_at] = now_text
  f[STATE.deadline] = deadline_text
  f[STATE.token] = token
  return table.concat(f, '|'), f[STATE.queue]
end
