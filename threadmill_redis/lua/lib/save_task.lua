--@include "lib/pack_task"

-- Write task `t` back to K.state (see lib/pack_task; `t.saved` then holds
-- the packed string).
local function save_task(K, t)
  redis.call('HSET', K.state, t.id, pack_task(t))
end
