--@include "lib/enter_ready"
--@include "lib/index_task"
--@include "lib/save_task"
--@include "lib/unindex_task"

-- Move DEFERRED task `t` to the tail of READY (run_after is kept as history).
local function promote_task(K, t)
  unindex_task(K, t)
  enter_ready(K, t)
  save_task(K, t)
  index_task(K, t)
end
