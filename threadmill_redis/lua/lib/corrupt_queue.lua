--@include "lib/layout"

-- The queue a corrupt state `raw` (false when missing) still names: its last
-- field, when it keeps the layout's number of '|'-separated fields
-- (STATE_FIELDS); else nil.
local function corrupt_queue(raw)
  if not raw then
    return nil
  end
  local pattern = '^' .. string.rep('[^|]*|', #STATE_FIELDS - 1) .. '(.+)$'
  return string.match(raw, pattern)
end
