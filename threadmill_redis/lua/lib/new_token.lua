-- A fencing token no task of this namespace ever had: the next number of a counter.
local function new_token(K)
  return string.format('%d', redis.call('HINCRBY', K.counters, 'token', 1))
end
