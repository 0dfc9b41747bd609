-- Wake up to `count` idle workers blocked on the notify list `key`, as
-- lib/notify does, leaving the list capped at `cap` tokens; but only the
-- tokens that fit are pushed, so nothing needs trimming, and a full list
-- (the usual state while every worker is busy) costs one read and no write.
local function notify_room(key, count, cap)
  local room = math.min(count, cap - redis.call('LLEN', key))
  if room <= 0 then
    return
  end
  local tokens = {}
  for i = 1, room do
    tokens[i] = '1'
  end
  redis.call('LPUSH', key, unpack(tokens))
end
