-- Expire at once the live leases of a worker known to be dead (a supervisor
-- saw its process die): each RUNNING task whose lease deadline is later than
-- now and whose current token is a worker's claim by that worker (the last
-- entry of its worker ids; a reaper's claim, told by K.starts, is not) gets
-- the deadline now, as if its lease had run out, and claim_expired decides it
-- at its next pass. Nothing else changes: not the token, not the record, not
-- another task.
--
-- There is no index by worker: the live leases are read from K.leases and
-- their workers with one HMGET, a pass over the running tasks made once per
-- dead worker process, which costs claims and decisions nothing. Every task
-- is read and checked before the first write.
--
--   KEYS[1]  state    HASH id -> packed task state (see lib/parse_task)
--   KEYS[2]  workers  HASH id -> encoded worker ids
--   KEYS[3]  running  ZSET view of RUNNING (see lib/segment_member)
--   KEYS[4]  leases   ZSET RUNNING ids by lease deadline ms
--   KEYS[5]  starts   HASH id -> "<unstarted expiries>|<claim>" (see lib/load_start)
--   ARGV[1]  worker_entry  the worker's id, encoded as an entry of the workers hash
--
-- Reply: how many leases it expired.

--@include "lib/hmget_all"
--@include "lib/index_task"
--@include "lib/last_worker"
--@include "lib/load_start"
--@include "lib/load_task"
--@include "lib/now_ms"
--@include "lib/save_task"
--@include "lib/unindex_task"

--@keys
local worker_entry = ARGV[1]

local now = now_ms()
local ids = redis.call('ZRANGEBYSCORE', K.leases, '(' .. now, '+inf')
local workers = hmget_all(K.workers, ids)
local doomed = {}
for n, id in ipairs(ids) do
  if workers[n] and last_worker(workers[n]) == worker_entry then
    local t = load_task(K, id)
    if t ~= nil and t.status == 'RUNNING' and t.token ~= nil and type(t.sort) == 'number' then
      local _, claim = load_start(K, id)
      if claim ~= 'r' .. t.token then
        doomed[#doomed + 1] = t
      end
    end
  end
end
for _, t in ipairs(doomed) do
  unindex_task(K, t)
  t.deadline = now
  t.sort = now
  save_task(K, t)
  index_task(K, t)
end
return #doomed
