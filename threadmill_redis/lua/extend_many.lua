-- Renew a batch of leases (a worker's heartbeat), each as extend.lua does.
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
--   KEYS[17] cancel_requests HASH id -> when a cancel was requested (server ms)
--   KEYS[18] progress        HASH id -> the last progress stored (codec bytes)
--   ARGV[1]  lease_ms  new lease length in milliseconds
--   ARGV[2..] two per lease: id, token
--
-- Reply: one {code, deadline ms, progress, cancel request} per lease, in order, as extend.lua replies.

--@include "lib/code"
--@include "lib/extend_task"
--@include "lib/load_task"
--@include "lib/now_ms"

--@keys
local lease_ms = tonumber(ARGV[1])

local now = now_ms()
local replies = {}
for i = 2, #ARGV, 2 do
  local status_code, progress, requested = extend_task(K, load_task(K, ARGV[i]), ARGV[i + 1],
    now, lease_ms)
  if status_code == code('OK') then
    replies[#replies + 1] = { status_code, now + lease_ms, progress, requested }
  else
    replies[#replies + 1] = { status_code, false }
  end
end
return replies
