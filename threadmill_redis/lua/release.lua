-- Give back claimed tasks that never started (a worker's prefetch at a
-- graceful shutdown, a task the worker did not load): each RUNNING task whose
-- token is the caller's, held by a worker's claim whose start was never
-- recorded, goes to the tail of READY (or, with a delay, to DEFERRED due at
-- now + delay) with its claim undone (lib/give_back). The token is cleared, so a repeat
-- after a lost reply, and any later use of the lease, is refused and changes
-- nothing. A task with a cancel request is finalized CANCELLED instead of
-- going back (its claim undone all the same; counted as finished).
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
--   KEYS[17] starts      HASH id -> "<unstarted expiries>|<claim>" (see lib/load_start)
--   KEYS[18] rates            HASH telemetry: "<second>|<queue>|e" (or "|f") -> tasks entered (finished)
--   KEYS[19] rate_index       ZSET telemetry: "<second>|<queue>" -> second
--   KEYS[20] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[21] cancel_requests HASH id -> when a cancel was requested (server ms)
--   ARGV[1]  delay_ms  0 for the READY tail, else DEFERRED due after this many ms
--   ARGV[2]  id        the first lease's task
--   ARGV[3]  token     that lease's token
--   ARGV[4..] two more per further lease: id, token
--
-- Reply: per lease, in order, an OK row with payload (lib/task_row), or
-- REFUSED (only code and id) for a stale token, a task not RUNNING, a
-- started claim or a reaper's. The caller wakes the queues' workers.

--@include "lib/code"
--@include "lib/give_back"
--@include "lib/load_start"
--@include "lib/load_task"
--@include "lib/now_ms"
--@include "lib/record_rates"
--@include "lib/tally"
--@include "lib/task_row"

--@keys

local delay_ms = tonumber(ARGV[1])
local now = now_ms()
local due_ms = nil
if delay_ms > 0 then
  due_ms = now + delay_ms
end
local rows, counts = {}, {}
for i = 2, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local t = load_task(K, id)
  local started = false
  if t ~= nil and t.status == 'RUNNING' and t.token == token then
    local _, claim = load_start(K, id)
    started = claim == token or claim == 'r' .. token
  end
  if t == nil or t.status ~= 'RUNNING' or t.token ~= token or started then
    rows[#rows + 1] = { code('REFUSED'), id }
  else
    if give_back(K, t, due_ms, now) then
      tally(counts, t.queue, 'f')
    end
    rows[#rows + 1] = task_row(K, t, code('OK'), true)
  end
end
record_rates(K, now, counts)
return rows
