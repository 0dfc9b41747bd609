-- Apply a batch of complete and retry decisions, each fenced and atomic on
-- its own exactly as complete.lua and retry.lua (tasks finalized are counted
-- as finished), then delete a bounded batch of expired results.
--
-- Keys: the task store, then one notify list per queue of the batch.
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
--   KEYS[19..] notify lists, indexed from ARGV
-- Arguments:
--   ARGV[1]  result_ttl_ms  result retention in milliseconds
--   ARGV[2]  prune_batch    most expired results to delete
--   ARGV[3]  notify_cap     most wake-up tokens a notify list keeps
--   ARGV[4..] seven per decision: kind ('complete' or 'retry'), id, token,
--            status (complete) or delay_ms (retry), encoded errors,
--            encoded result ('' for none), KEYS index of the notify list
--
-- Reply: one row per decision, in order, as complete.lua and retry.lua reply.

--@include "lib/code"
--@include "lib/complete_task"
--@include "lib/load_task"
--@include "lib/notify"
--@include "lib/now_ms"
--@include "lib/prune_expired"
--@include "lib/record_rates"
--@include "lib/retry_task"
--@include "lib/tally"
--@include "lib/task_row"

--@keys
local result_ttl_ms = tonumber(ARGV[1])
local prune_batch = tonumber(ARGV[2])
local notify_cap = tonumber(ARGV[3])

local now = now_ms()
local rows = {}
local counts = {}
for i = 4, #ARGV, 7 do
  local id, token = ARGV[i + 1], ARGV[i + 2]
  local t = load_task(K, id)
  local status_code
  if ARGV[i] == 'complete' then
    status_code = complete_task(K, t, token, ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], now)
    if status_code == code('OK') then
      tally(counts, t.queue, 'f')
    end
  else
    status_code = retry_task(K, t, token, tonumber(ARGV[i + 3]), ARGV[i + 4], now)
    if status_code == code('OK') and t.status == 'READY' then
      notify(KEYS[tonumber(ARGV[i + 6])], 1, notify_cap)
    end
  end
  if status_code == code('REFUSED') then
    rows[#rows + 1] = { status_code, id }
  elseif status_code == code('OK') then
    -- Applied now: the caller has the errors and result it sent; only the state is news.
    rows[#rows + 1] = { status_code, id, t.saved }
  else
    rows[#rows + 1] = task_row(K, t, status_code, false)
  end
end
record_rates(K, now, counts)
prune_expired(K, now, result_ttl_ms, prune_batch)
return rows
