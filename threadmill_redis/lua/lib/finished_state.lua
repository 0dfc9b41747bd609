-- The packed state (lib/parse_task's layout) of task state `raw` finalized as
-- `status` at server time `now_text` (decimal ms) under lease `token`, as
-- lib/mark_finished changes the table: sort and finished_at now, no deadline,
-- the token kept. Also returns the lease deadline it had (its sort in
-- RUNNING's view, as text) and its queue. Nil unless `raw` is RUNNING under
-- `token` and of lib/parse_task's shape (the one match checks it), the one
-- case lib/decision_refused lets a completion apply: the caller parses the
-- state (lib/parse_task) only for the others. A batch of
-- completions runs this per task, on the string, for what the table costs.
local function finished_state(raw, token, status, now_text)
  if not raw or token == '' then
    return nil
  end
  local kept, sort, middle, held, queue = string.match(raw,
    '^RUNNING|(%-?%d+|%d+)|(%-?%d+)|(%d*|%d*|%d*|%d*)|%d*|%d*|([^|]*)|(.*)$')
  if held ~= token then
    return nil
  end
  return status .. '|' .. kept .. '|' .. now_text .. '|' .. middle .. '|' .. now_text .. '||'
    .. token .. '|' .. queue, sort, queue
end
