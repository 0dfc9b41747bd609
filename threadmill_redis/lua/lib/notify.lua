-- Wake up to `count` idle workers blocked on the notify list `key` (see
-- RedisBackend.wait_for_tasks). The list is capped at `cap` tokens: with
-- nobody waiting the tokens only cause one early return each, never growth.
local function notify(key, count, cap)
  if count <= 0 then
    return
  end
  local tokens = {}
  for i = 1, math.min(count, cap) do
    tokens[i] = '1'
  end
  redis.call('LPUSH', key, unpack(tokens))
  redis.call('LTRIM', key, 0, cap - 1)
end
