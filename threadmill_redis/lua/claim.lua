-- Promote the due DEFERRED tasks of the given queues, then move up to `limit`
-- READY tasks to RUNNING, queues in the order given, each in READY order,
-- and leave a receipt of the leases granted. A call whose receipt exists is
-- a repeat after a lost reply: it changes nothing and answers with the leases
-- of the receipt still held under their tokens.
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
--   KEYS[17] receipt     LIST this call's receipt (unique per call, same on a repeat): the
--                        tokens' base, then the ids granted (the n-th id's token is base + n)
--   KEYS[18] starts      HASH id -> "<unstarted expiries>|<claim>" (see lib/load_start)
--   ARGV[1]  worker_entry  the worker's id, encoded for the workers hash
--   ARGV[2]  lease_ms      lease length in milliseconds
--   ARGV[3]  limit         most tasks to claim
--   ARGV[4..] queues       queue names, best first
--
-- Reply: empty when nothing is ready; else the code (OK, or REPEAT on a
-- repeat), then one row per claimed task, best first, payload included, as
-- lib/task_row lays it out without the code and the result (a RUNNING task
-- has none), then the task's count of expired unstarted claims given back
-- (lib/load_start; '' for none): six fields a task, the rows one after
-- another in the one list (a table a row would cost the server more than the
-- rest of its reply). A repeat answers the same rows, in the same order, of
-- the tasks still RUNNING under their tokens.
--
-- A queue's batch costs a fixed number of commands, whatever its size: its
-- tokens come from one HINCRBY, its records are read with one HMGET per hash
-- and written with one HSET or ZADD per hash or index (K.starts, read for the
-- count of give-backs, included), and the receipt is one RPUSH.

--@include "lib/call_in_slices"
--@include "lib/claimed_state"
--@include "lib/code"
--@include "lib/hmget_all"
--@include "lib/load_task"
--@include "lib/member_id"
--@include "lib/now_ms"
--@include "lib/promote_task"
--@include "lib/queue_prefix"
--@include "lib/sort_bound"
--@include "lib/task_row"
--@include "lib/timed_member"

--@keys
local worker_entry = ARGV[1]
local lease_ms = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

if redis.call('EXISTS', K.receipt) == 1 then
  local rows = { code('REPEAT') }
  local held = redis.call('LRANGE', K.receipt, 0, -1)
  local base = tonumber(held[1])
  for n = 1, #held - 1 do
    local t = load_task(K, held[n + 1])
    if t ~= nil and t.status == 'RUNNING' and t.token == string.format('%d', base + n) then
      local row = task_row(K, t, code('REPEAT'), true)
      for f = 2, 6 do
        rows[#rows + 1] = row[f]
      end
      rows[#rows + 1] = string.match(redis.call('HGET', K.starts, t.id) or '', '^%d*')
    end
  end
  return #rows > 1 and rows or {}
end

local now, now_text = now_ms()
local deadline = now + lease_ms
local deadline_text = string.format('%d', deadline)
local OK = code('OK')
-- Every due task, as the protocol says (not a batch): the maintenance loop's
-- promote_due keeps this backlog short.
for i = 4, #ARGV do
  local queue = ARGV[i]
  -- Due means run_after <= now, so the exclusive bound is now + 1.
  local due = redis.call('ZRANGEBYLEX', K.deferred,
    '[' .. queue_prefix(queue), '(' .. sort_bound(queue, now + 1))
  for _, member in ipairs(due) do
    promote_task(K, load_task(K, member_id(member)))
  end
end

local rows, receipt, claimed = { OK }, {}, 0
for i = 4, #ARGV do
  if claimed >= limit then
    break
  end
  local prefix = queue_prefix(ARGV[i])
  local members = redis.call('ZRANGEBYLEX', K.ready, '[' .. prefix, '(' .. prefix .. ':',
    'LIMIT', 0, limit - claimed)
  if #members > 0 then
    -- Out of READY first: a write that frees memory, so a server at its
    -- maxmemory (noeviction) still lets the claim go on and drain the queue.
    call_in_slices({ 'ZREM', K.ready }, members)
    -- One HINCRBY reserves a fresh token for each task of this queue.
    local last = redis.call('HINCRBY', K.counters, 'token', #members)
    -- The batch is read, and written, one command per hash or index. Every
    -- member holds the queue's prefix and 19 digits of sort key before the
    -- id (lib/member_id), so the id starts at the same place in each.
    local ids, at_id = {}, #prefix + 20
    for n, member in ipairs(members) do
      ids[n] = string.sub(member, at_id)
    end
    local states = hmget_all(K.state, ids)
    local payloads = hmget_all(K.payload, ids)
    local errors = hmget_all(K.errors, ids)
    local old_workers = hmget_all(K.workers, ids)
    local starts = hmget_all(K.starts, ids)
    local state_args, worker_args = {}, {}
    local first = last - #members -- tokens first + n
    -- A call's tokens come from the one counter, in order: so one base for all.
    receipt[1] = receipt[1] or string.format('%d', first)
    for n, id in ipairs(ids) do
      local token = string.format('%d', first + n)
      local state = claimed_state(states[n], now_text, deadline_text, token)
      local workers = (old_workers[n] or '') .. worker_entry
      local two = 2 * n
      state_args[two - 1], state_args[two] = id, state
      worker_args[two - 1], worker_args[two] = id, workers
      receipt[1 + claimed + n] = id
      -- The row of lib/task_row, from what is being written (a RUNNING task
      -- has no result), then the count of give-backs.
      local r = 1 + 6 * (claimed + n)
      rows[r - 5], rows[r - 4], rows[r - 3], rows[r - 2], rows[r - 1], rows[r] =
        id, state, payloads[n], errors[n], workers, string.match(starts[n] or '', '^%d*')
    end
    call_in_slices({ 'HSET', K.state }, state_args)
    call_in_slices({ 'HSET', K.workers }, worker_args)
    -- RUNNING's view and the lease index, as lib/index_task adds them: the
    -- batch shares its queue and deadline, so it sorts there by id, and it
    -- is added last id first. A small sorted set is a list Redis scans from
    -- the head for the place of each member added: so each lands before
    -- the batch's others without passing them. (Only the cost depends on
    -- the order.)
    local sorted = {}
    for n, id in ipairs(ids) do
      sorted[n] = id
    end
    table.sort(sorted)
    local running, leases, queue = {}, {}, ARGV[i]
    for n = 1, #sorted do
      local id, two = sorted[#sorted + 1 - n], 2 * n
      running[two - 1], running[two] = '0', timed_member(queue, deadline, id)
      leases[two - 1], leases[two] = deadline_text, id
    end
    call_in_slices({ 'ZADD', K.running }, running)
    call_in_slices({ 'ZADD', K.leases }, leases)
    claimed = claimed + #members
  end
end
if claimed == 0 then
  return {}
end
call_in_slices({ 'RPUSH', K.receipt }, receipt)
redis.call('PEXPIRE', K.receipt, lease_ms)
return rows
