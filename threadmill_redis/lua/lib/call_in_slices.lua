-- redis.call(head..., items...) for a list of any length: in slices of 1,000
-- items, since unpack cannot spread more than a few thousand values. The
-- slice size is even, so items given in pairs (ZADD, HSET) stay paired.
-- Returns the reply of each slice, in order.
local function call_in_slices(head, items)
  local count = #items
  if count == 0 then
    return {}
  end
  -- Up to 1,000 items (the usual case) are spread into one call, not copied.
  if count <= 1000 then
    if #head == 2 then
      return { redis.call(head[1], head[2], unpack(items)) }
    elseif #head == 3 then
      return { redis.call(head[1], head[2], head[3], unpack(items)) }
    end
  end
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
