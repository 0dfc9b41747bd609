-- Make task `t` READY at the tail of its priority level: the next number of
-- the namespace-wide entered-READY sequence (unique, so FIFO is strict even
-- for tasks entering in the same millisecond).
local function enter_ready(K, t)
  t.status = 'READY'
  t.sort = redis.call('HINCRBY', K.counters, 'seq', 1)
end
