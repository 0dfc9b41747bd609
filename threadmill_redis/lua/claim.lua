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
--                        tokens' base, then the ids granted (the n-th id's token is base + n,
--                        then '-' and the nonce; an empty id where a corrupt record took n)
--   KEYS[18] rates       HASH telemetry: "<second>|<queue>|e" (or "|f") -> tasks entered (finished)
--   KEYS[19] rate_index  ZSET telemetry: "<second>|<queue>" -> second
--   KEYS[20] starts      HASH id -> "<unstarted expiries>|<claim>" (see lib/load_start)
--   KEYS[21] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[22] cancel_requests HASH id -> when a cancel was requested (server ms)
--   ARGV[1]  worker_entry  the worker's id, encoded for the workers hash
--   ARGV[2]  lease_ms      lease length in milliseconds
--   ARGV[3]  limit         most tasks to claim
--   ARGV[4]  nonce         random text unique to this call (the same on a repeat), no '|'
--   ARGV[5..] queues       queue names, best first
--
-- Reply: one row per claimed task, best first (none when nothing is ready):
-- lib/task_row's, payload included, its code OK (REPEAT on a repeat) and its
-- result and cancel request nil (a RUNNING task has no result, and a task
-- with a cancel request never goes back to READY), then the task's count of
-- expired unstarted claims given back (lib/load_start). A repeat answers the same
-- rows, in the same order, of the tasks still RUNNING under their tokens.
--
-- A queue's batch costs a fixed number of commands, whatever its size: its
-- tokens come from one HINCRBY, its records are read with one HMGET per hash
-- and written with one HSET or ZADD per hash or index (K.starts, read for the
-- count of give-backs, and K.progress included), and the receipt is one RPUSH.

--@include "lib/call_in_slices"
--@include "lib/claimed_state"
--@include "lib/code"
--@include "lib/hmget_all"
--@include "lib/load_start"
--@include "lib/load_task"
--@include "lib/member_id"
--@include "lib/parse_task"
--@include "lib/now_ms"
--@include "lib/promote_task"
--@include "lib/quarantine_corrupt"
--@include "lib/queue_prefix"
--@include "lib/sort_bound"
--@include "lib/task_row"
--@include "lib/timed_member"

--@keys
local worker_entry = ARGV[1]
local lease_ms = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
-- A token is the next number of the namespace's counter, then '-' and this
-- call's nonce: a counter stored with the data repeats its numbers after a
-- restore from a snapshot or a failover to a replica that lost writes, and
-- the nonce, chosen by the client for each call, never does (Lua has no
-- randomness of its own), so no token is ever issued twice for a task.
local nonce = '-' .. ARGV[4]

if redis.call('EXISTS', K.receipt) == 1 then
  local rows = {}
  local held = redis.call('LRANGE', K.receipt, 0, -1)
  local base = tonumber(held[1])
  for n = 1, #held - 1 do
    local t = load_task(K, held[n + 1])
    if t ~= nil and t.status == 'RUNNING' and t.token == string.format('%d', base + n) .. nonce then
      local row = task_row(K, t, code('REPEAT'), true)
      row[10] = load_start(K, t.id)
      rows[#rows + 1] = row
    end
  end
  return rows
end

local now, now_text = now_ms()
local deadline = now + lease_ms
local deadline_text = string.format('%d', deadline)
local OK = code('OK')
-- Every due task, as the protocol says (not a batch): the maintenance loop's
-- promote_due keeps this backlog short.
for i = 5, #ARGV do
  local queue = ARGV[i]
  -- Due means run_after <= now, so the exclusive bound is now + 1.
  local due = redis.call('ZRANGEBYLEX', K.deferred,
    '[' .. queue_prefix(queue), '(' .. sort_bound(queue, now + 1))
  for _, member in ipairs(due) do
    local id = member_id(member)
    local t, corrupt = load_task(K, id)
    if t ~= nil and t.status == 'DEFERRED' then
      promote_task(K, t)
    else -- a stale member, or a corrupt record (quarantined): not promoted
      redis.call('ZREM', K.deferred, member)
      if t == nil then
        quarantine_corrupt(K, id, queue, corrupt, now_text)
      end
    end
  end
end

local rows, receipt, claimed = {}, {}, 0
local i = 5
while i <= #ARGV and claimed < limit do
  local queue = ARGV[i]
  local prefix = queue_prefix(queue)
  local want = limit - claimed
  local members = redis.call('ZRANGEBYLEX', K.ready, '[' .. prefix, '(' .. prefix .. ':',
    'LIMIT', 0, want)
  local corrupt = 0
  if #members > 0 then
    -- Out of READY first: a write that frees memory, so a server at its
    -- maxmemory (noeviction) still lets the claim go on and drain the queue.
    -- Nothing after it can fail: a corrupt state is quarantined, not claimed.
    call_in_slices({ 'ZREM', K.ready }, members)
    -- One HINCRBY reserves a fresh token for each task of this queue.
    local last = redis.call('HINCRBY', K.counters, 'token', #members)
    -- The batch is read, and written, one command per hash or index.
    local ids = {}
    for n, member in ipairs(members) do
      ids[n] = member_id(member)
    end
    local states = hmget_all(K.state, ids)
    local payloads = hmget_all(K.payload, ids)
    local errors = hmget_all(K.errors, ids)
    local old_workers = hmget_all(K.workers, ids)
    local starts = hmget_all(K.starts, ids)
    local progress = hmget_all(K.progress, ids)
    local state_args, worker_args, running, leases = {}, {}, {}, {}
    local first = last - #members -- tokens first + n
    -- A call's tokens come from the one counter, in order: so one base for
    -- all, and the receipt holds an empty id where a token went unused.
    receipt[1] = receipt[1] or string.format('%d', first)
    for n, id in ipairs(ids) do
      local token = string.format('%d', first + n) .. nonce
      local state = states[n] and claimed_state(states[n], now_text, deadline_text, token)
      if state then
        local workers = (old_workers[n] or '') .. worker_entry
        claimed = claimed + 1
        state_args[#state_args + 1] = id
        state_args[#state_args + 1] = state
        worker_args[#worker_args + 1] = id
        worker_args[#worker_args + 1] = workers
        -- RUNNING's view and the lease index, as lib/index_task adds them.
        running[#running + 1] = '0'
        running[#running + 1] = timed_member(queue, deadline, id)
        leases[#leases + 1] = deadline_text
        leases[#leases + 1] = id
        receipt[#receipt + 1] = id
        -- The row of lib/task_row, from what is being written (a RUNNING task
        -- has no result), then the count of give-backs (lib/load_start's).
        local given_back = tonumber(string.match(starts[n] or '', '^%d*')) or 0
        rows[#rows + 1] = {
          OK, id, state, payloads[n], errors[n], workers, false, progress[n], false, given_back,
        }
      else -- not claimed: a corrupt record is quarantined
        corrupt = corrupt + 1
        receipt[#receipt + 1] = ''
        -- (A valid state of another status only lost this stale member.)
        if not (states[n] and parse_task(id, states[n])) then
          quarantine_corrupt(K, id, queue, states[n], now_text)
        end
      end
    end
    call_in_slices({ 'HSET', K.state }, state_args)
    call_in_slices({ 'HSET', K.workers }, worker_args)
    call_in_slices({ 'ZADD', K.running }, running)
    call_in_slices({ 'ZADD', K.leases }, leases)
  end
  -- The queue is done unless corrupt records took places its next tasks can fill.
  if corrupt == 0 or #members < want then
    i = i + 1
  end
end
if claimed == 0 then
  return {}
end
call_in_slices({ 'RPUSH', K.receipt }, receipt)
redis.call('PEXPIRE', K.receipt, lease_ms)
return rows
