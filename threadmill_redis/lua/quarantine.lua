-- Finalize claimed tasks whose stored bytes do not decode (poison) as FAILED,
-- each fenced by the token of the claim that found it, replacing the payload
-- with a readable stand-in so the task can be inspected and purged, and
-- counting each as finished; then delete a bounded batch of expired results.
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
--   ARGV[1]  result_ttl_ms  result retention in milliseconds
--   ARGV[2]  prune_batch    most expired results to delete
--   ARGV[3..] four per task: id, token, stand-in payload bytes, encoded
--            errors (ending with the TaskQuarantined error)
--
-- Reply: one status code per task, in order: OK, REPEAT (already
-- quarantined under this token) or REFUSED (the claim was superseded).

--@include "lib/code"
--@include "lib/complete_task"
--@include "lib/load_task"
--@include "lib/now_ms"
--@include "lib/prune_expired"
--@include "lib/record_rates"
--@include "lib/tally"

--@keys
local result_ttl_ms = tonumber(ARGV[1])
local prune_batch = tonumber(ARGV[2])

local now = now_ms()
local codes = {}
local counts = {}
for i = 3, #ARGV, 4 do
  local id = ARGV[i]
  local t = load_task(K, id)
  local status_code = complete_task(K, t, ARGV[i + 1], 'FAILED', ARGV[i + 3], '', now)
  if status_code == code('OK') then
    tally(counts, t.queue, 'f')
    redis.call('HSET', K.payload, id, ARGV[i + 2])
  end
  codes[#codes + 1] = status_code
end
record_rates(K, now, counts)
prune_expired(K, now, result_ttl_ms, prune_batch)
return codes
