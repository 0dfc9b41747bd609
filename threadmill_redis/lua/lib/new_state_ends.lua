-- lib/new_state's text before and after `sort_text`, for tasks that share
-- all else: head .. sort_text .. tail is new_state(status, priority_text,
-- sort_text, now_text, run_after_text, queue).
local function new_state_ends(status, priority_text, now_text, run_after_text, queue)
  return status .. '|' .. priority_text .. '|0|',
    '|' .. now_text .. '|' .. run_after_text .. '||||||' .. queue
end
