--@include "lib/layout"

-- The packed state of task state `raw` finalized as `status` at server time
-- `now_text` (decimal ms) under lease `token`, as lib/mark_finished changes
-- the table: sort and finished_at now, no deadline, the token kept. Also
-- returns the lease deadline it had (its sort in RUNNING's view, as text)
-- and its queue. Nil unless `raw` is RUNNING under `token` and of the layout
-- (the match checks it), the one case lib/decision_refused lets a completion
-- apply: the caller parses the state (lib/parse_task) only for the others.
-- Fast path: changes the fields of the string in place instead of a table
-- from lib/parse_task packed again by lib/pack_task (the plain twin, which
-- tests/redis/test_state_transforms.py holds it to).
local function finished_state(raw, token, status, now_text)
  if not raw or token == '' then
    return nil
  end
  local f = { string.match(raw, STATE_PATTERN) }
  if f[STATE.status] ~= 'RUNNING' or f[STATE.token] ~= token then
    return nil
  end
  local sort = f[STATE.sort]
  f[STATE.status] = status
  f[STATE.sort] = now_text
  f[STATE.finished_at] = now_text
  f[STATE.deadline] = ''
  return table.concat(f, '|'), sort, f[STATE.queue]
end
