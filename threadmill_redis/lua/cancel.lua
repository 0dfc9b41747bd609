-- Move a READY or DEFERRED task to CANCELLED (finished now, and counted as
-- finished), clearing its token so no repeat of an earlier lease's retry is
-- answered any more.
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
--   KEYS[17] rates       HASH telemetry: "<second>|<queue>|e" (or "|f") -> tasks entered (finished)
--   KEYS[18] rate_index  ZSET telemetry: "<second>|<queue>" -> second
--   KEYS[19] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[20] cancel_requests HASH id -> when a cancel was requested (server ms)
--   ARGV[1]  id       the task
--   ARGV[2]  state    its stored state as the caller read it (see lib/unchanged)
--   ARGV[3]  payload  its stored payload as the caller read and decoded it
--
-- Reply: an OK row with payload (lib/task_row); REFUSED (only code and id)
-- for any other status; NOT_FOUND (only code and id) for an unknown task;
-- CHANGED (only code and id), changing nothing, when the task's stored state
-- or payload is no longer what the caller read.

--@include "lib/code"
--@include "lib/index_task"
--@include "lib/load_task"
--@include "lib/now_ms"
--@include "lib/record_rates"
--@include "lib/save_task"
--@include "lib/tally"
--@include "lib/task_row"
--@include "lib/unchanged"
--@include "lib/unindex_task"

--@keys
local id = ARGV[1]

if not unchanged(K, id, ARGV[2], ARGV[3]) then
  return { code('CHANGED'), id }
end

local t = load_task(K, id)
if t == nil then
  return { code('NOT_FOUND'), id }
end
if t.status ~= 'READY' and t.status ~= 'DEFERRED' then
  return { code('REFUSED'), id }
end
unindex_task(K, t)
t.status = 'CANCELLED'
local now = now_ms()
t.finished_at = now
t.sort = t.finished_at
t.token = nil
save_task(K, t)
index_task(K, t)
local counts = {}
tally(counts, t.queue, 'f')
record_rates(K, now, counts)
return task_row(K, t, code('OK'), true)
