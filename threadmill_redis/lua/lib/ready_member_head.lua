--@include "lib/queue_prefix"

-- What the READY members of one queue and priority share, for a batch's run:
-- ready_member(queue, priority, sort, id) is this head ..
-- string.format('%016d', sort) .. id.
local function ready_member_head(queue, priority)
  return queue_prefix(queue) .. string.format('%03d', 100 - priority)
end
