--@include "lib/call_in_slices"

-- redis.call(command, key, items...) for a list of any length, as
-- lib/call_in_slices does it, except that a list of up to 1,000 items (the
-- usual case) is spread into one call without being copied first.
-- Returns the reply of each call, in order.
local function call_spread(command, key, items)
  if #items <= 1000 then
    return { redis.call(command, key, unpack(items)) }
  end
  return call_in_slices({ command, key }, items)
end
