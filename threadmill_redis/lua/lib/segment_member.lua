--@include "lib/ready_member"
--@include "lib/timed_member"

-- The member of task `t` (see lib/parse_task) in the view of its status
-- (see lib/ready_member for the layout).
local function segment_member(t)
  if t.status == 'READY' then
    return ready_member(t.queue, t.priority, t.sort, t.id)
  end
  return timed_member(t.queue, t.sort, t.id)
end
