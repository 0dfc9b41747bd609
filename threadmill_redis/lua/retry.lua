-- Send a RUNNING task back for another attempt under its lease's token: to
-- the tail of READY (waking a worker) or, with a delay, to DEFERRED; a task
-- with a cancel request is finalized CANCELLED instead (counted as finished,
-- see lib/retry_task).
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
--   KEYS[17] notify    LIST the task queue's notify list
--   KEYS[18] rates            HASH telemetry: "<second>|<queue>|e" (or "|f") -> tasks entered (finished)
--   KEYS[19] rate_index       ZSET telemetry: "<second>|<queue>" -> second
--   KEYS[20] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[21] cancel_requests HASH id -> when a cancel was requested (server ms)
--   ARGV[1]  id          the task
--   ARGV[2]  token       the lease's token
--   ARGV[3]  delay_ms    0 for READY, else due after this many milliseconds
--   ARGV[4]  errors      encoded errors (replace the stored ones)
--   ARGV[5]  notify_cap  most wake-up tokens a notify list keeps
--
-- Reply: OK with code, id, the new state, the progress and the cancel request
-- (nil when none; the caller has the rest); REPEAT, a row without payload
-- (lib/task_row), when this token already sent the task back and it still
-- waits, or finalized it CANCELLED (nothing changed); REFUSED (only code and id).

--@include "lib/code"
--@include "lib/load_task"
--@include "lib/notify"
--@include "lib/now_ms"
--@include "lib/record_rates"
--@include "lib/tally"
--@include "lib/retry_task"
--@include "lib/task_row"

--@keys
local id = ARGV[1]
local token = ARGV[2]
local delay_ms = tonumber(ARGV[3])
local errors = ARGV[4]
local notify_cap = tonumber(ARGV[5])

local now = now_ms()
local t = load_task(K, id)
local status_code = retry_task(K, t, token, delay_ms, errors, now)
if status_code == code('REFUSED') then
  return { status_code, id }
end
if status_code == code('OK') then
  if t.status == 'READY' then
    notify(K.notify, 1, notify_cap)
  elseif t.status == 'CANCELLED' then
    local counts = {}
    tally(counts, t.queue, 'f')
    record_rates(K, now, counts)
  end
  -- Applied now: the caller has the errors it sent; only the state is news.
  return { status_code, id, t.saved, redis.call('HGET', K.progress, id),
    redis.call('HGET', K.cancel_requests, id) }
end
return task_row(K, t, status_code, false)
