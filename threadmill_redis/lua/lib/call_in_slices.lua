-- redis.call(head..., items...) for a list of any length: in slices of 1,000
-- items, since unpack cannot spread more than a few thousand values. The
-- slice size is even, so items given in pairs (ZADD, HSET) stay paired.
-- Returns the reply of each slice, in order.
local function call_in_slices(head, items)
  local replies = {}
  for from = 1, #items, 1000 do
    local args = { unpack(head) }
    for i = from, math.min(from + 999, #items) do
      args[#args + 1] = items[i]
    end
    replies[#replies + 1] = redis.call(unpack(args))
  end
  return replies
end
