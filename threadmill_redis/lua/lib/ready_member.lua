--@include "lib/layout"
--@include "lib/ready_member_head"

-- The member of a task in its segment view: queue prefix, SORT_KEY_DIGITS
-- digits of sort key, id. All members share score 0, so lex order is
-- segment order: READY by (100 - priority, entered-READY sequence), the
-- others by t.sort (due time, lease deadline or finished time), each then by
-- id. Digits, not doubles, so the key stays exact at any size.

-- The member of a READY task: `sort` is its entered-READY sequence number.
local function ready_member(queue, priority, sort, id)
  return ready_member_head(queue, priority) .. string.format(READY_SEQUENCE_FORMAT, sort) .. id
end
