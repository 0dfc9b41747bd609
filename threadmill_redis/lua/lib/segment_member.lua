--@include "lib/queue_prefix"

-- The member of task `t` in its segment view: queue prefix, 19 digits of sort
-- key, id. All members share score 0, so lex order is segment order: READY by
-- (100 - priority, entered-READY sequence), the others by t.sort (due time,
-- lease deadline or finished time), each then by id. Digits, not doubles, so
-- the key stays exact at any size.
-- The 19-digit sort keys of this script call: the tasks of a batch share
-- their lease deadline or finished time.
local sort_keys = {}

local function segment_member(t)
  local key
  if t.status == 'READY' then
    key = string.format('%03d%016d', 100 - t.priority, t.sort)
  else
    key = sort_keys[t.sort]
    if key == nil then
      key = string.format('%019d', t.sort)
      sort_keys[t.sort] = key
    end
  end
  return queue_prefix(t.queue) .. key .. t.id
end
