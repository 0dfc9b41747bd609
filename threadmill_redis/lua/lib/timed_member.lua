--@include "lib/layout"
--@include "lib/queue_prefix"

-- See lib/ready_member for the layout of segment members.

-- The sort keys (SORT_KEY_DIGITS digits) of this script call: the tasks of a batch share
-- their due time, lease deadline or finished time.
local sort_keys = {}

-- The member of a task in any other segment: `sort` is a time in ms, a
-- number or its decimal text (as stored: a batch read from states needs no
-- tonumber, and each text is formatted once).
local function timed_member(queue, sort, id)
  local key = sort_keys[sort]
  if key == nil then
    key = string.format(SORT_KEY_FORMAT, sort)
    sort_keys[sort] = key
  end
  return queue_prefix(queue) .. key .. id
end
