--@include "lib/pack_number"
--@include "lib/segment_member"

-- Add task `t` to the view of its segment and, by status, to the
-- namespace-wide time index (due, leases or finished) that maintenance reads.
local function index_task(K, t)
  redis.call('ZADD', K[string.lower(t.status)], '0', segment_member(t))
  if t.status == 'DEFERRED' then
    redis.call('ZADD', K.due, pack_number(t.sort), t.id)
  elseif t.status == 'RUNNING' then
    redis.call('ZADD', K.leases, pack_number(t.sort), t.id)
  elseif t.status ~= 'READY' then
    redis.call('ZADD', K.finished, pack_number(t.sort), t.id)
  end
end
