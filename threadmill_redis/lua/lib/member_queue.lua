--@include "lib/layout"

-- The queue of a segment member (see lib/ready_member), and where its sort
-- key starts.
local function member_queue(member)
  local queue_len = tonumber(string.sub(member, 1, QUEUE_LENGTH_DIGITS), 16)
  local sort_at = QUEUE_LENGTH_DIGITS + queue_len + 1
  return string.sub(member, QUEUE_LENGTH_DIGITS + 1, sort_at - 1), sort_at
end
