-- The task id at the end of a segment member (see segment_member).
local function member_id(member)
  local queue_len = tonumber(string.sub(member, 1, 8), 16)
  return string.sub(member, 8 + queue_len + 19 + 1)
end
