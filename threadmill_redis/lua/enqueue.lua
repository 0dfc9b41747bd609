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
-- see lib/call_in_slices). Stored ids are found with one HMGET of the payload
-- hash; the new tasks' payloads, states and indexes are written with one
-- HSET or ZADD each, their sequence numbers reserved with one HINCRBY;
-- queue sizes, telemetry and wake-ups take one or two commands per queue; a
-- repeat costs the six HGETs of its row. A lone task goes to enqueue_one.lua,
-- which does the same in fewer steps.

--@include "lib/call_in_slices"
--@include "lib/code"
--@include "lib/hmget_all"
--@include "lib/load_task"
--@include "lib/new_state"
--@include "lib/new_state_ends"
--@include "lib/notify_room"
--@include "lib/now_ms"
--@include "lib/record_rates"
--@include "lib/queue_prefix"
--@include "lib/task_row"

--@keys
local notify_cap = tonumber(ARGV[1])
local OK, EXISTS = code('OK'), code('EXISTS')

local now, now_text = now_ms()

-- '00' to '99', at [n + 1]: the last two digits of a number's decimal text,
-- without a string.format (see the READY loop below).
local TWO_DIGITS = {
  '00', '01', '02', '03', '04', '05', '06', '07', '08', '09',
  '10', '11', '12', '13', '14', '15', '16', '17', '18', '19',
  '20', '21', '22', '23', '24', '25', '26', '27', '28', '29',
  '30', '31', '32', '33', '34', '35', '36', '37', '38', '39',
  '40', '41', '42', '43', '44', '45', '46', '47', '48', '49',
  '50', '51', '52', '53', '54', '55', '56', '57', '58', '59',
  '60', '61', '62', '63', '64', '65', '66', '67', '68', '69',
  '70', '71', '72', '73', '74', '75', '76', '77', '78', '79',
  '80', '81', '82', '83', '84', '85', '86', '87', '88', '89',
  '90', '91', '92', '93', '94', '95', '96', '97', '98', '99',
}

-- What the tasks of a run share in their segment members (lib/ready_member,
-- lib/timed_member): the queue prefix, then the priority (READY) or the due
-- time (DEFERRED); made once per run, not per task.
local function member_prefix(queue, priority, deferred, run_after)
  if deferred then
    return queue_prefix(queue) .. string.format('%019d', run_after)
  end
  return queue_prefix(queue) .. string.format('%03d', 100 - priority)
end

-- A batch. The runs (each a table of what its records share, and where its
-- pairs are in ARGV), and every record's id in order.
local runs, ids, n = {}, {}, 0
local at = 2
while at <= #ARGV do
  local count = tonumber(ARGV[at])
  local run_after = tonumber(ARGV[at + 3])
  runs[#runs + 1] = {
    first = at + 5, last = at + 3 + 2 * count, queue = ARGV[at + 1],
    priority = tonumber(ARGV[at + 2]), run_after = run_after,
    deferred = run_after ~= nil and run_after > now, notify = KEYS[tonumber(ARGV[at + 4])],
  }
  for i = at + 5, at + 3 + 2 * count, 2 do
    n = n + 1
    ids[n] = ARGV[i]
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
  local fresh, count = {}, 0 -- ARGV index of each new task's id
  for i = run.first, run.last, 2 do
    k = k + 1
    local id = ARGV[i]
    if stored[k] or seen[id] then
      rows[k + 1] = false
      repeats[k + 1] = id
    else
      seen[id] = true
      count = count + 1
      fresh[count] = i
      rows[k + 1] = OK
    end
  end
  run.fresh = fresh
  if not run.deferred then
    entering = entering + count
  end
end

-- One HINCRBY reserves the next numbers of the entered-READY sequence (as
-- lib/enter_ready takes them one at a time), handed out in the order given.
local seq = 0
if entering > 0 then
  seq = redis.call('HINCRBY', K.counters, 'seq', entering) - entering
end

-- The writes, gathered into one command per hash or index.
local payloads, states, ready, deferred, due = {}, {}, {}, {}, {}
local np, ns, nr, nd = 0, 0, 0, 0
local counts, woken = {}, {}
for _, run in ipairs(runs) do
  local fresh = run.fresh
  if #fresh > 0 then
    local queue = run.queue
    local priority_text = string.format('%d', run.priority)
    local run_after_text = run.run_after and string.format('%d', run.run_after) or ''
    local prefix = member_prefix(queue, run.priority, run.deferred, run.run_after)
    local ready_count = 0
    if run.deferred then
      local state = new_state('DEFERRED', priority_text, run_after_text, now_text,
        run_after_text, queue)
      for _, i in ipairs(fresh) do
        local id = ARGV[i]
        states[ns + 1], states[ns + 2] = id, state
        ns = ns + 2
        deferred[nd + 1], deferred[nd + 2] = '0', prefix .. id
        due[nd + 1], due[nd + 2] = run_after_text, id
        nd = nd + 2
      end
    else
      -- The sequence number's text, in the state and 16 digits wide in the
      -- member (lib/ready_member), is made of its hundreds, formatted once
      -- per hundred tasks, and its last two digits, from TWO_DIGITS: a
      -- string.format per task would cost a tenth of the script's work.
      local state_head, state_tail =
        new_state_ends('READY', priority_text, now_text, run_after_text, queue)
      local hundreds, seq_head, member_head
      for _, i in ipairs(fresh) do
        local id = ARGV[i]
        seq = seq + 1
        local last = seq % 100
        if seq - last ~= hundreds then
          hundreds = seq - last
          local text = hundreds > 0 and string.format('%d', hundreds / 100) or ''
          seq_head = state_head .. text
          member_head = prefix .. string.rep('0', 14 - #text) .. text
        end
        local digits = TWO_DIGITS[last + 1]
        states[ns + 1] = id
        if seq < 10 then -- no hundreds and one digit: the text is not '07'
          states[ns + 2] = seq_head .. string.format('%d', seq) .. state_tail
        else
          states[ns + 2] = seq_head .. digits .. state_tail
        end
        ns = ns + 2
        ready[nr + 1] = '0'
        ready[nr + 2] = member_head .. digits .. id
        nr = nr + 2
      end
      ready_count = #fresh
    end
    for _, i in ipairs(fresh) do
      payloads[np + 1], payloads[np + 2] = ARGV[i], ARGV[i + 1]
      np = np + 2
    end
    local of_queue = counts[queue]
    if of_queue == nil then
      of_queue = { e = 0 }
      counts[queue] = of_queue
    end
    of_queue.e = of_queue.e + #fresh
    -- A wake-up per task entering READY, and at least one per queue for
    -- deferred tasks too (an idle worker then asks next_due.lua when to claim).
    woken[run.notify] = (woken[run.notify] or 0) + ready_count
  end
end
if np > 0 then
  call_in_slices({ 'HSET', K.payload }, payloads)
  call_in_slices({ 'HSET', K.state }, states)
end
if nr > 0 then
  call_in_slices({ 'ZADD', K.ready }, ready)
end
if nd > 0 then
  call_in_slices({ 'ZADD', K.deferred }, deferred)
  call_in_slices({ 'ZADD', K.due }, due)
end
for queue, kinds in pairs(counts) do
  redis.call('HINCRBY', K.queues, queue, kinds.e)
end
record_rates(K, now, counts)
for key, count in pairs(woken) do
  notify_room(key, math.max(count, 1), notify_cap)
end

for index, id in pairs(repeats) do
  rows[index] = task_row(K, load_task(K, id), EXISTS, true)
end
return rows
