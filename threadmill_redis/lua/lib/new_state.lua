--@include "lib/pack_task"

-- The packed state of a task stored at server time `now` (ms): `status`,
-- `priority`, its place `sort` in its segment (nil: left empty, see
-- lib/split_around), enqueued now, due after `run_after` (nil for none), in
-- `queue`; no attempts, no other timestamps, no token.
local function new_state(status, priority, sort, now, run_after, queue)
  return pack_task({
    status = status, priority = priority, attempts = 0, sort = sort, enqueued_at = now,
    run_after = run_after, queue = queue,
  })
end
