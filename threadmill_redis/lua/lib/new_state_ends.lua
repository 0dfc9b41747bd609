-- What lib/new_state writes around its `sort_text`, for tasks that share
-- everything else (a batch's run): new_state(status, priority_text, sort_text,
-- now_text, run_after_text, queue) is head .. sort_text .. tail. Two pieces
-- made once let each task's state be one concatenation.
local function new_state_ends(status, priority_text, now_text, run_after_text, queue)
  return status .. '|' .. priority_text .. '|0|', '|' .. now_text .. '|' .. run_after_text
    .. '||||||' .. queue
end
