--@include "lib/layout"
--@include "lib/queue_prefix"

-- The segment member prefix of `queue` up to a time-like sort key `ms`:
-- every member of that queue whose sort key is below `ms` sorts before it.
local function sort_bound(queue, ms)
  return queue_prefix(queue) .. string.format(SORT_KEY_FORMAT, ms)
end
