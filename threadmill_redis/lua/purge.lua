-- Delete up to `batch` tasks of one segment (never RUNNING) of one queue;
-- the caller repeats until a call deletes fewer than `batch`, so each call
-- stays short and each task's deletion is atomic.
--
--   KEYS[1]  payload     HASH id -> the record as enqueued (codec bytes, opaque here)
--   KEYS[2]  state       HASH id -> packed task state (see lib/parse_task)
--   KEYS[3]  errors      HASH id -> encoded errors
--   KEYS[4]  workers     HASH id -> encoded worker ids
--   KEYS[5]  result      HASH id -> encoded return value
--   KEYS[6]  ready       ZSET view of READY (see lib/segment_member)
--   KEYS[7]  deferred    ZSET view of DEFERRED
--   KEYS[8]  running     ZSET view of RUNNING
--   KEYS[9]  successful  ZSET view of SUCCESSFUL
--   KEYS[10] failed      ZSET view of FAILED
--   KEYS[11] cancelled   ZSET view of CANCELLED
--   KEYS[12] due         ZSET DEFERRED ids by run_after ms
--   KEYS[13] leases      ZSET RUNNING ids by lease deadline ms
--   KEYS[14] finished    ZSET terminal ids by finished_at ms
--   KEYS[15] counters    HASH seq and token counters
--   KEYS[16] queues      HASH queue -> number of tasks stored
--   KEYS[17] starts      HASH id -> "<unstarted expiries>|<claim>" (deleted with the task)
--   KEYS[18] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[19] cancel_requests HASH id -> when a cancel was requested (server ms)
--   ARGV[1]  queue          the queue
--   ARGV[2]  status         READY, DEFERRED, SUCCESSFUL, FAILED or CANCELLED
--   ARGV[3]  batch          most tasks to delete in this call
--   ARGV[4]  result_ttl_ms  result retention in milliseconds
--
-- Reply: {tasks deleted, of which were live}: expired results are deleted
-- too, but were already gone for every reader, so they are not counted.

--@include "lib/delete_corrupt"
--@include "lib/delete_task"
--@include "lib/is_expired"
--@include "lib/load_task"
--@include "lib/member_id"
--@include "lib/now_ms"
--@include "lib/queue_prefix"

--@keys
local queue = ARGV[1]
local status = ARGV[2]
local batch = tonumber(ARGV[3])
local result_ttl_ms = tonumber(ARGV[4])

local now = now_ms()
local prefix = queue_prefix(queue)
local members = redis.call('ZRANGEBYLEX', K[string.lower(status)], '[' .. prefix,
  '(' .. prefix .. ':', 'LIMIT', 0, batch)
local live = 0
for _, member in ipairs(members) do
  local t, corrupt = load_task(K, member_id(member))
  if t == nil then -- a corrupt record: deleted and counted like any other
    live = live + 1
    delete_corrupt(K, member_id(member), corrupt, K[string.lower(status)], member)
  elseif t.status ~= status then -- a stale member (the task is elsewhere): only it goes
    redis.call('ZREM', K[string.lower(status)], member)
  else
    if not is_expired(t, now, result_ttl_ms) then
      live = live + 1
    end
    delete_task(K, t)
  end
end
return { #members, live }
