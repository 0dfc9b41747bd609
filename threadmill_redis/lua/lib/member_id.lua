--@include "lib/layout"

-- The task id at the end of a segment member (see lib/ready_member).
local function member_id(member)
  local queue_len = tonumber(string.sub(member, 1, QUEUE_LENGTH_DIGITS), 16)
  return string.sub(member, QUEUE_LENGTH_DIGITS + queue_len + SORT_KEY_DIGITS + 1)
end
