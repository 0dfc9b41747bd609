-- Read up to `limit` records of one segment of one queue, in segment order,
-- skipping `offset`; expired results are not part of a terminal segment.
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
--   KEYS[12] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[13] cancel_requests HASH id -> when a cancel was requested (server ms)
--   ARGV[1]  queue          the queue
--   ARGV[2]  status         the segment: READY, DEFERRED, ... CANCELLED
--   ARGV[3]  offset         members to skip
--   ARGV[4]  limit          most records to return
--   ARGV[5]  result_ttl_ms  result retention in milliseconds
--
-- Reply: OK rows with payload (lib/task_row), in segment order, one per
-- member: a task whose state is corrupt or missing answers as stored.

--@include "lib/code"
--@include "lib/load_task"
--@include "lib/member_id"
--@include "lib/now_ms"
--@include "lib/queue_prefix"
--@include "lib/sort_bound"
--@include "lib/task_row"

--@keys
local queue = ARGV[1]
local status = ARGV[2]
local offset = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local result_ttl_ms = tonumber(ARGV[5])

local prefix = queue_prefix(queue)
local low = '[' .. prefix
if status == 'SUCCESSFUL' or status == 'FAILED' or status == 'CANCELLED' then
  -- Live results finished after now - ttl; their members sort from here on.
  low = '[' .. sort_bound(queue, now_ms() - result_ttl_ms + 1)
end
local rows = {}
local members = redis.call('ZRANGEBYLEX', K[string.lower(status)], low, '(' .. prefix .. ':',
  'LIMIT', offset, limit)
for _, member in ipairs(members) do
  local id = member_id(member)
  -- A corrupt record's row (its state garbled or missing) too, as stored:
  -- the caller reports it (task_row needs only the id).
  rows[#rows + 1] = task_row(K, load_task(K, id) or { id = id }, code('OK'), true)
end
return rows
