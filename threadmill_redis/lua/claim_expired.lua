-- The reaper's claim: up to `limit` RUNNING tasks whose lease deadline has
-- passed, oldest first over all queues, each given a fresh token and the
-- deadline now + claim_ms so no other pass decides it; an undecided claim
-- lapses like any lease and is taken up again. Not an attempt: attempts,
-- worker ids and last_attempted_at are unchanged.
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
--   ARGV[1]  limit     most tasks to claim
--   ARGV[2]  claim_ms  claim length in milliseconds
--
-- Reply: one OK row per claimed task, oldest deadline first, payload
-- included (lib/task_row).

--@include "lib/code"
--@include "lib/index_task"
--@include "lib/load_task"
--@include "lib/new_token"
--@include "lib/now_ms"
--@include "lib/save_task"
--@include "lib/task_row"
--@include "lib/unindex_task"

--@keys
local limit = tonumber(ARGV[1])
local claim_ms = tonumber(ARGV[2])

local now = now_ms()
local rows = {}
-- A lease is valid before its deadline and expired from it on.
for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.leases, '-inf', now, 'LIMIT', 0, limit)) do
  local t = load_task(K, id)
  unindex_task(K, t)
  t.token = new_token(K)
  t.deadline = now + claim_ms
  t.sort = t.deadline
  save_task(K, t)
  index_task(K, t)
  rows[#rows + 1] = task_row(K, t, code('OK'), true)
end
return rows
