--@include "lib/layout"
--@include "lib/queue_prefix"

-- What the READY members (lib/ready_member) of `queue`'s tasks of `priority`
-- start with: the queue prefix and the priority part of the sort key.
local function ready_member_head(queue, priority)
  return queue_prefix(queue) .. string.format(READY_PRIORITY_FORMAT, 100 - priority)
end
