-- Store new tasks in READY or DEFERRED, idempotent on id, count them as
-- entered (repeats of a stored id are not), and wake idle workers. Every
-- `enqueue` comes here, one task or many: a long batch is sent as several
-- calls of this script, pipelined.
--
-- Keys: the parts of the task store an enqueue touches, then one notify
-- list per queue of the call.
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
--   KEYS[13] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[14] cancel_requests HASH id -> when a cancel was requested (server ms)
--   KEYS[15..] notify lists, indexed from ARGV
-- Arguments:
--   ARGV[1]  notify_cap   most wake-up tokens a notify list keeps
--   ARGV[2..] the records, in runs that share queue, priority and run_after:
--            a run is its length n, queue, priority, run_after ms ('' for
--            none), KEYS index of the queue's notify list, then n pairs of
--            id and payload bytes
--
-- Reply: the server time in ms (enqueued_at of every task stored), then one
-- row per record, in order: the bare code OK for a new task, whose record
-- the caller can tell from what it sent and that time (DEFERRED when its
-- run_after is later, else READY); a full row (lib/task_row, payload
-- included) with code EXISTS for an id already stored, so the stored record
-- answers, also for an id given twice in one call.
--
-- Costs: a fixed number of commands per call, whatever its size (lists of
-- up to 1,000 items go in one command, longer ones in slices of that size;
-- see lib/call_in_slices): stored ids are found with one HMGET of the
-- payload hash; the new tasks' payloads, states and indexes are written with
-- one HSET or ZADD each, their sequence numbers reserved with one HINCRBY;
-- queue sizes, telemetry and wake-ups take one or two commands per queue; a
-- repeat costs the six HGETs of its row.
--
-- One record (a lone `Broker.enqueue`, the usual call) is written straight:
-- the same writes, without the tables that gather a batch's, and with one
-- HSETNX of its payload that both tests the id and stores it. The gathering
-- costs a lone record more than all its writes do; the conformance kit
-- enqueues both ways.

--@include "lib/call_in_slices"
--@include "lib/code"
--@include "lib/hmget_all"
--@include "lib/new_state"
--@include "lib/notify_room"
--@include "lib/now_ms"
--@include "lib/ready_member"
--@include "lib/split_around"
--@include "lib/record_rates"
--@include "lib/task_row"
--@include "lib/timed_member"

--@keys
local notify_cap = tonumber(ARGV[1])
local OK, EXISTS = code('OK'), code('EXISTS')

local now = now_ms()

if #ARGV == 8 then -- one run of one record: ARGV[2] is 1
  local queue, priority, run_after = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  local id = ARGV[7]
  if redis.call('HSETNX', K.payload, id, ARGV[8]) == 0 then
    return { now, task_row(K, { id = id }, EXISTS, true) }
  end
  if run_after ~= nil and run_after > now then
    redis.call('HSET', K.state, id, new_state('DEFERRED', priority, run_after, now, run_after, queue))
    redis.call('ZADD', K.deferred, '0', timed_member(queue, run_after, id))
    redis.call('ZADD', K.due, ARGV[5], id)
  else
    local seq = redis.call('HINCRBY', K.counters, 'seq', 1)
    redis.call('HSET', K.state, id, new_state('READY', priority, seq, now, run_after, queue))
    redis.call('ZADD', K.ready, '0', ready_member(queue, priority, seq, id))
  end
  redis.call('HINCRBY', K.queues, queue, 1)
  record_rates(K, now, { [queue] = { e = 1 } })
  -- One wake-up, for a deferred task too (as below).
  notify_room(KEYS[tonumber(ARGV[6])], 1, notify_cap)
  return { now, OK }
end

-- The runs (what their records share, and where their pairs are in ARGV),
-- and every record's id in order.
local runs, ids = {}, {}
local at = 2
while at <= #ARGV do
  local count = tonumber(ARGV[at])
  local run_after = tonumber(ARGV[at + 3])
  runs[#runs + 1] = {
    first = at + 5, last = at + 3 + 2 * count, queue = ARGV[at + 1],
    priority = tonumber(ARGV[at + 2]), run_after = run_after, run_after_text = ARGV[at + 3],
    deferred = run_after ~= nil and run_after > now, notify = KEYS[tonumber(ARGV[at + 4])],
  }
  for i = at + 5, at + 3 + 2 * count, 2 do
    ids[#ids + 1] = ARGV[i]
  end
  at = at + 5 + 2 * count
end

-- Which ids are stored already: the payload hash holds every stored id
-- (lib/delete_task drops it with the rest).
local stored = hmget_all(K.payload, ids)

-- Each record is new, or a repeat of a stored id or of an id given earlier
-- in this call (answered after the writes, with the first one's record).
local rows = { now }
local repeats = {} -- rows index -> id
local seen = {}
local entering = 0 -- how many new tasks enter READY
local k = 0
for _, run in ipairs(runs) do
  run.fresh = {} -- ARGV index of each new task's id
  for i = run.first, run.last, 2 do
    k = k + 1
    local id = ARGV[i]
    if stored[k] or seen[id] then
      rows[k + 1] = false
      repeats[k + 1] = id
    else
      seen[id] = true
      run.fresh[#run.fresh + 1] = i
      rows[k + 1] = OK
    end
  end
  if not run.deferred then
    entering = entering + #run.fresh
  end
end

-- One HINCRBY reserves the next numbers of the entered-READY sequence (as
-- lib/enter_ready takes them one at a time), handed out in the order given.
local seq = 0
if entering > 0 then
  seq = redis.call('HINCRBY', K.counters, 'seq', entering) - entering
end

-- The writes, gathered into one command per hash or index. What a run's
-- tasks share is packed once per run: a deferred task's whole state, and a
-- READY task's state around its sort field (its entered-READY sequence
-- number, lib/split_around) and its member's head (lib/ready_member_head).
local payloads, states, ready, deferred, due = {}, {}, {}, {}, {}
local counts, woken = {}, {}
for _, run in ipairs(runs) do
  local queue = run.queue
  if run.deferred then
    local state = new_state('DEFERRED', run.priority, run.run_after, now, run.run_after, queue)
    for _, i in ipairs(run.fresh) do
      local id = ARGV[i]
      payloads[#payloads + 1] = id
      payloads[#payloads + 1] = ARGV[i + 1]
      states[#states + 1] = id
      states[#states + 1] = state
      deferred[#deferred + 1] = '0'
      deferred[#deferred + 1] = timed_member(queue, run.run_after, id)
      due[#due + 1] = run.run_after_text
      due[#due + 1] = id
    end
  else
    local head, tail =
      split_around(new_state('READY', run.priority, nil, now, run.run_after, queue), 'sort')
    local member_head = ready_member_head(queue, run.priority)
    for _, i in ipairs(run.fresh) do
      local id = ARGV[i]
      seq = seq + 1
      payloads[#payloads + 1] = id
      payloads[#payloads + 1] = ARGV[i + 1]
      states[#states + 1] = id
      states[#states + 1] = head .. string.format('%d', seq) .. tail
      ready[#ready + 1] = '0'
      ready[#ready + 1] = member_head .. string.format(READY_SEQUENCE_FORMAT, seq) .. id
    end
  end
  if #run.fresh > 0 then
    local of_queue = counts[queue] or { e = 0 }
    counts[queue] = of_queue
    of_queue.e = of_queue.e + #run.fresh
    -- A wake-up per task entering READY, and at least one per queue for
    -- deferred tasks too (an idle worker then asks next_due.lua when to claim).
    woken[run.notify] = (woken[run.notify] or 0) + (run.deferred and 0 or #run.fresh)
  end
end
call_in_slices({ 'HSET', K.payload }, payloads)
call_in_slices({ 'HSET', K.state }, states)
call_in_slices({ 'ZADD', K.ready }, ready)
call_in_slices({ 'ZADD', K.deferred }, deferred)
call_in_slices({ 'ZADD', K.due }, due)
for queue, kinds in pairs(counts) do
  redis.call('HINCRBY', K.queues, queue, kinds.e)
end
record_rates(K, now, counts)
for key, count in pairs(woken) do
  notify_room(key, math.max(count, 1), notify_cap)
end

for index, id in pairs(repeats) do
  rows[index] = task_row(K, { id = id }, EXISTS, true)
end
return rows
