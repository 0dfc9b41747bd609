-- Store new tasks in READY or DEFERRED, idempotent on id, count them as
-- entered (repeats of a stored id are not), and wake idle workers.
--
-- Keys: the parts of the task store an enqueue touches, then one notify
-- list per queue of the batch.
--   KEYS[1]  payload     HASH id -> what the producer gave (codec bytes, opaque here)
--   KEYS[2]  state       HASH id -> packed task state (see lib/parse_task)
--   KEYS[3]  errors      HASH id -> encoded errors
--   KEYS[4]  workers     HASH id -> encoded worker ids
--   KEYS[5]  result      HASH id -> encoded return value
--   KEYS[6]  ready       ZSET view of READY (see lib/segment_member)
--   KEYS[7]  deferred    ZSET view of DEFERRED
--   KEYS[8]  due         ZSET DEFERRED ids by run_after ms
--   KEYS[9]  counters    HASH seq and token counters
--   KEYS[10] queues      HASH queue -> number of tasks stored
--   KEYS[11] rates       HASH telemetry: "<second>|<queue>|e" (or "|f") -> tasks entered (finished)
--   KEYS[12] rate_index  ZSET telemetry: "<second>|<queue>" -> second
--   KEYS[13..] notify lists, indexed from ARGV
-- Arguments:
--   ARGV[1]  notify_cap   most wake-up tokens a notify list keeps
--   ARGV[2..] six per record: id, queue, priority, run_after ms ('' for
--            none), payload bytes, KEYS index of the queue's notify list
--
-- Reply: the server time in ms (enqueued_at of every task stored), then one
-- row per record, in order: the bare code OK for a new task, whose record
-- the caller can tell from what it sent and that time (DEFERRED when its
-- run_after is later, else READY); a full row (lib/task_row, payload
-- included) with code EXISTS for an id already stored, so the stored record
-- answers, also for an id given twice in one call.
--
-- A new task costs two commands of its own (HSETNX of the payload, which is
-- also the test for a stored id, and the state's HSET); the sequence
-- numbers, READY view, queue sizes, telemetry and wake-ups take one or two
-- commands per call or per queue, however many tasks.

--@include "lib/call_in_slices"
--@include "lib/code"
--@include "lib/index_task"
--@include "lib/load_task"
--@include "lib/notify_room"
--@include "lib/now_ms"
--@include "lib/record_rates"
--@include "lib/save_task"
--@include "lib/segment_member"
--@include "lib/tally"
--@include "lib/task_row"

--@keys
local notify_cap = tonumber(ARGV[1])
local OK, EXISTS = code('OK'), code('EXISTS')

local now = now_ms()
local rows = { now }
local stored = {} -- the new tasks, in order
local repeats = {} -- rows index -> id already stored
local entering = 0 -- how many of them enter READY
for i = 2, #ARGV, 6 do
  local id = ARGV[i]
  -- The payload hash holds every stored id (lib/delete_task drops it with the
  -- rest), so setting it only if absent both stores a new task and finds a repeat.
  if redis.call('HSETNX', K.payload, id, ARGV[i + 4]) == 0 then
    rows[#rows + 1] = false
    repeats[#rows] = id
  else
    local run_after = tonumber(ARGV[i + 3])
    local t = {
      id = id, queue = ARGV[i + 1], priority = tonumber(ARGV[i + 2]), attempts = 0,
      enqueued_at = now, run_after = run_after, notify = KEYS[tonumber(ARGV[i + 5])],
    }
    if run_after ~= nil and run_after > now then
      t.status = 'DEFERRED'
      t.sort = run_after
    else
      t.status = 'READY'
      entering = entering + 1
    end
    stored[#stored + 1] = t
    rows[#rows + 1] = OK
  end
end

-- One HINCRBY reserves the next numbers of the entered-READY sequence (as
-- lib/enter_ready takes them one at a time), handed out in the order given.
local seq = 0
if entering > 0 then
  seq = redis.call('HINCRBY', K.counters, 'seq', entering) - entering
end
local counts, woken, members = {}, {}, {}
for _, t in ipairs(stored) do
  if t.status == 'READY' then
    seq = seq + 1
    t.sort = seq
    -- READY's view, as lib/index_task adds it, in one ZADD below.
    members[#members + 1] = 0
    members[#members + 1] = segment_member(t)
    woken[t.notify] = (woken[t.notify] or 0) + 1
  else
    index_task(K, t)
    -- One wake-up per queue for deferred tasks too: an idle worker then asks
    -- when the next task falls due (next_due.lua) and claims it on time.
    woken[t.notify] = woken[t.notify] or 1
  end
  save_task(K, t)
  tally(counts, t.queue, 'e')
end
if #members > 0 then
  call_in_slices({ 'ZADD', K.ready }, members)
end
for queue, kinds in pairs(counts) do
  redis.call('HINCRBY', K.queues, queue, kinds.e)
end
record_rates(K, now, counts)
for key, count in pairs(woken) do
  notify_room(key, count, notify_cap)
end

-- After the writes, so an id given twice in this call answers with the first's record.
for index, id in pairs(repeats) do
  rows[index] = task_row(K, load_task(K, id), EXISTS, true)
end
return rows
