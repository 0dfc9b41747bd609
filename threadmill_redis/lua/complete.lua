-- Finalize a RUNNING task as SUCCESSFUL, FAILED or CANCELLED under its lease's token
-- (counted as finished), then delete a bounded batch of expired results.
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
--   KEYS[19] starts      HASH id -> "<unstarted expiries>|<claim>" (deleted with the task)
--   KEYS[20] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[21] cancel_requests HASH id -> when a cancel was requested (server ms)
--   ARGV[1]  id            the task
--   ARGV[2]  token         the lease's token
--   ARGV[3]  status        SUCCESSFUL, FAILED or CANCELLED
--   ARGV[4]  errors        encoded errors (replace the stored ones)
--   ARGV[5]  result        encoded return value, '' for none
--   ARGV[6]  result_ttl_ms result retention in milliseconds
--   ARGV[7]  prune_batch   most expired results to delete
--
-- Reply: OK with code, id, the new state, the progress and the cancel request
-- (nil when none; the caller has the rest);
-- REPEAT, a row without payload (lib/task_row), when this token already
-- finalized the task (nothing changed); REFUSED (only code and id).

--@include "lib/code"
--@include "lib/complete_task"
--@include "lib/load_task"
--@include "lib/now_ms"
--@include "lib/prune_expired"
--@include "lib/record_rates"
--@include "lib/tally"
--@include "lib/task_row"

--@keys
local id = ARGV[1]
local token = ARGV[2]
local status = ARGV[3]
local errors = ARGV[4]
local result = ARGV[5]
local result_ttl_ms = tonumber(ARGV[6])
local prune_batch = tonumber(ARGV[7])

local now = now_ms()
local t = load_task(K, id)
local status_code = complete_task(K, t, token, status, errors, result, now)
if status_code == code('OK') then
  local counts = {}
  tally(counts, t.queue, 'f')
  record_rates(K, now, counts)
end
prune_expired(K, now, result_ttl_ms, prune_batch)
if status_code == code('REFUSED') then
  return { status_code, id }
end
if status_code == code('OK') then
  -- Applied now: the caller has the errors and result it sent; only the state is news.
  return { status_code, id, t.saved, redis.call('HGET', K.progress, id),
    redis.call('HGET', K.cancel_requests, id) }
end
return task_row(K, t, status_code, false)
