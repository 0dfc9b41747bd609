--@include "lib/layout"

-- The packed state `packed` (lib/pack_task's layout) in two pieces around
-- its field `field` (a name of STATE), which is empty in it: states that
-- differ only in that field are head .. text .. tail, so a batch packs what
-- its tasks share once. The fields before `field` must not hold '|' (they
-- are numbers and the status, ahead of the token and the queue).
local function split_around(packed, field)
  local at = 0
  for _ = 1, STATE[field] - 1 do
    at = string.find(packed, '|', at + 1, true)
  end
  return string.sub(packed, 1, at), string.sub(packed, at + 1)
end
