-- Store what lib/load_start reads for task `id`: `count` unstarted expiries
-- given back, and `claim` (a token, 'r' .. token, or ''); nothing at all for
-- 0 and ''.
local function save_start(K, id, count, claim)
  if count == 0 and claim == '' then
    redis.call('HDEL', K.starts, id)
  else
    redis.call('HSET', K.starts, id, string.format('%d', count) .. '|' .. claim)
  end
end
