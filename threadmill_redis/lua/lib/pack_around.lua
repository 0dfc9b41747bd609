--@include "lib/layout"
--@include "lib/pack_task"

-- Task `t`'s state packed (lib/pack_task) in two pieces around its field
-- `field` (a name of STATE), which `t` leaves nil: tasks that differ only in
-- that field pack as head .. text .. tail, so a batch packs what its tasks
-- share once. The fields before `field` must not hold '|' (they are numbers
-- and the status, ahead of the token and the queue).
local function pack_around(t, field)
  local packed = pack_task(t)
  local at = 0
  for _ = 1, STATE[field] - 1 do
    at = string.find(packed, '|', at + 1, true)
  end
  return string.sub(packed, 1, at), string.sub(packed, at + 1)
end
