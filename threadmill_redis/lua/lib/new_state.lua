-- The packed state (lib/pack_task's layout) of a task stored at server time
-- `now_text` (decimal ms): no attempts, no timestamps but enqueued_at and
-- run_after, no token. Every argument is text; `run_after_text` is '' for none.
local function new_state(status, priority_text, sort_text, now_text, run_after_text, queue)
  return status .. '|' .. priority_text .. '|0|' .. sort_text .. '|' .. now_text .. '|'
    .. run_after_text .. '||||||' .. queue
end
