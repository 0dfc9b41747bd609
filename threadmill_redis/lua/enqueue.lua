-- Store new tasks in READY or DEFERRED, idempotent on id, count them as
-- entered (repeats of a stored id are not), and wake idle workers.
--
-- Keys: the task store, then one notify list per queue of the batch.
--   KEYS[1]  payload     HASH id -> the record as enqueued (codec bytes, opaque here)
--   KEYS[2]  state       HASH id -> packed task state (see lib/load_task)
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
--   ARGV[1]  notify_cap   most wake-up tokens a notify list keeps
--   ARGV[2..] six per record: id, queue, priority, run_after ms ('' for
--            none), payload bytes, KEYS index of the queue's notify list
--
-- Reply: one row per record, in order (lib/task_row): OK for a new task,
-- payload omitted since the caller has it; EXISTS for an id already stored,
-- with the stored record, payload included.

--@include "lib/code"
--@include "lib/enter_ready"
--@include "lib/index_task"
--@include "lib/load_task"
--@include "lib/notify"
--@include "lib/now_ms"
--@include "lib/record_rates"
--@include "lib/save_task"
--@include "lib/tally"
--@include "lib/task_row"

local K = {
  payload = KEYS[1],
  state = KEYS[2],
  errors = KEYS[3],
  workers = KEYS[4],
  result = KEYS[5],
  ready = KEYS[6],
  deferred = KEYS[7],
  running = KEYS[8],
  successful = KEYS[9],
  failed = KEYS[10],
  cancelled = KEYS[11],
  due = KEYS[12],
  leases = KEYS[13],
  finished = KEYS[14],
  counters = KEYS[15],
  queues = KEYS[16],
  rates = KEYS[17],
  rate_index = KEYS[18],
}
local notify_cap = tonumber(ARGV[1])

local now = now_ms()
local woken = {}
local counts = {}
local rows = {}
for i = 2, #ARGV, 6 do
  local id = ARGV[i]
  local existing = load_task(K, id)
  if existing then
    rows[#rows + 1] = task_row(K, existing, code('EXISTS'), true)
  else
    local run_after = tonumber(ARGV[i + 3])
    local t = {
      id = id, queue = ARGV[i + 1], priority = tonumber(ARGV[i + 2]), attempts = 0,
      enqueued_at = now, run_after = run_after,
    }
    if run_after ~= nil and run_after > now then
      t.status = 'DEFERRED'
      t.sort = run_after
    else
      enter_ready(K, t)
      local notify_key = KEYS[tonumber(ARGV[i + 5])]
      woken[notify_key] = (woken[notify_key] or 0) + 1
    end
    redis.call('HSET', K.payload, id, ARGV[i + 4])
    redis.call('HINCRBY', K.queues, t.queue, 1)
    save_task(K, t)
    index_task(K, t)
    tally(counts, t.queue, 'e')
    rows[#rows + 1] = task_row(K, t, code('OK'), false)
  end
end
record_rates(K, now, counts)
for key, count in pairs(woken) do
  notify(key, count, notify_cap)
end
return rows
