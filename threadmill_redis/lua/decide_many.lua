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
--   KEYS[19] starts      HASH id -> "<unstarted expiries>|<claim>" (deleted with the task)
--   KEYS[20] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[21] cancel_requests HASH id -> when a cancel was requested (server ms)
--   KEYS[22..] notify lists, indexed from ARGV
-- Arguments:
--   ARGV[1]  result_ttl_ms  result retention in milliseconds
--   ARGV[2]  prune_batch    most expired results to delete
--   ARGV[3]  notify_cap     most wake-up tokens a notify list keeps
--   ARGV[4..] seven per decision: kind ('complete' or 'retry'), id, token,
--            status (complete) or delay_ms (retry), encoded errors,
--            encoded result ('' for none), KEYS index of the notify list
--
-- Reply: the server time of the call (decimal ms), at which every completion
-- it applied finished; then one row per decision, in order, as complete.lua
-- and retry.lua reply, but for an applied completion: the bare OK code, or
-- {OK, id, nil, progress, cancel request} for a task that has either. The
-- caller has the errors and result it sent, and the state such a completion
-- leaves follows from the lease's and that time (lib/finished_state), so
-- nothing else of the task is sent back.
--
-- Cost: the usual batch (completions of distinct tasks) takes a fixed
-- number of commands, whatever its size: one HMGET reads every state (one
-- more each the progress and the cancel requests, which no decision changes), and
-- the completions are written together, one command per hash or index. A
-- retry, or a task decided a second time in the same call, is applied on its
-- own as retry.lua and complete.lua do, after the completions before it are
-- written, so the batch answers exactly as the same decisions sent one by one.

--@include "lib/call_in_slices"
--@include "lib/code"
--@include "lib/complete_task"
--@include "lib/decision_refused"
--@include "lib/finished_state"
--@include "lib/hmget_all"
--@include "lib/load_task"
--@include "lib/notify"
--@include "lib/now_ms"
--@include "lib/parse_task"
--@include "lib/prune_expired"
--@include "lib/record_rates"
--@include "lib/retry_task"
--@include "lib/tally"
--@include "lib/task_row"
--@include "lib/timed_member"

--@keys
local result_ttl_ms = tonumber(ARGV[1])
local prune_batch = tonumber(ARGV[2])
local notify_cap = tonumber(ARGV[3])
local OK, REFUSED = code('OK'), code('REFUSED')

local now, now_text = now_ms()
local ids = {}
for i = 4, #ARGV, 7 do
  ids[#ids + 1] = ARGV[i + 1]
end
-- As they were before this call: a task's entry is read only while no
-- decision of this call has changed it (see `seen`).
local states = hmget_all(K.state, ids)
local progress = hmget_all(K.progress, ids)
local requests = hmget_all(K.cancel_requests, ids)

-- Completions applied but not yet written: each list is the arguments of one
-- command (see flush). Only the first decision on a task joins them.
local pending
local function reset()
  pending = {
    n = 0, running = {}, leases = {}, state = {}, errors = {}, no_errors = {}, result = {},
    views = { SUCCESSFUL = {}, FAILED = {}, CANCELLED = {} }, finished = {},
  }
end
reset()

local function flush()
  if pending.n == 0 then
    return
  end
  call_in_slices({ 'ZREM', K.running }, pending.running)
  call_in_slices({ 'ZREM', K.leases }, pending.leases)
  call_in_slices({ 'HSET', K.state }, pending.state)
  if #pending.errors > 0 then
    call_in_slices({ 'HSET', K.errors }, pending.errors)
  end
  if #pending.no_errors > 0 then
    call_in_slices({ 'HDEL', K.errors }, pending.no_errors)
  end
  if #pending.result > 0 then
    call_in_slices({ 'HSET', K.result }, pending.result)
  end
  for status, members in pairs(pending.views) do
    if #members > 0 then
      call_in_slices({ 'ZADD', K[string.lower(status)] }, members)
    end
  end
  call_in_slices({ 'ZADD', K.finished }, pending.finished)
  reset()
end

-- Finalize RUNNING task `id` of `queue` as lib/complete_task does, its writes
-- left in `pending`: `state` is its new state and `sort` its lease deadline
-- (lib/finished_state). An empty error list is stored as no entry, which
-- reads the same.
local function complete_later(id, sort, queue, state, status, errors, result)
  local p = pending
  local n = p.n + 1
  p.n = n
  -- `sort` as text: lib/timed_member formats it once per batch, never parsed.
  p.running[n] = timed_member(queue, sort, id)
  p.leases[n] = id
  p.state[2 * n - 1], p.state[2 * n] = id, state
  if errors == '[]' then
    p.no_errors[#p.no_errors + 1] = id
  else
    p.errors[#p.errors + 1] = id
    p.errors[#p.errors + 1] = errors
  end
  if result ~= '' then
    p.result[#p.result + 1] = id
    p.result[#p.result + 1] = result
  end
  local view = p.views[status]
  view[#view + 1] = '0'
  view[#view + 1] = timed_member(queue, now, id)
  p.finished[2 * n - 1], p.finished[2 * n] = now_text, id
end

local rows, counts, seen = { now_text }, {}, {}
for n, id in ipairs(ids) do
  local i = 4 + (n - 1) * 7
  local kind, token = ARGV[i], ARGV[i + 2]
  local t, status_code, saved, queue
  if kind == 'complete' and not seen[id] and pending.views[ARGV[i + 3]] then
    local sort
    saved, sort, queue = finished_state(states[n], token, ARGV[i + 3], now_text)
    if saved ~= nil then
      complete_later(id, sort, queue, saved, ARGV[i + 3], ARGV[i + 4], ARGV[i + 5])
      status_code = OK
    else -- refused, or a repeat: answered from the task as stored
      t = states[n] and parse_task(id, states[n]) or nil
      status_code = decision_refused(t, token, COMPLETED)
      assert(status_code ~= nil, 'lib/finished_state and lib/decision_refused disagree')
    end
  else
    -- Applied on its own, on the task as stored now.
    flush()
    t = load_task(K, id)
    if kind == 'complete' then
      status_code = complete_task(K, t, token, ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], now)
    else
      status_code = retry_task(K, t, token, tonumber(ARGV[i + 3]), ARGV[i + 4], now)
      if status_code == OK and t.status == 'READY' then
        notify(KEYS[tonumber(ARGV[i + 6])], 1, notify_cap)
      end
    end
    saved, queue = t and t.saved, t and t.queue
  end
  seen[id] = true
  if status_code == OK and (kind == 'complete' or t.status == 'CANCELLED') then
    tally(counts, queue, 'f')
  end
  if status_code == REFUSED then
    rows[#rows + 1] = { status_code, id }
  elseif status_code == OK and kind == 'complete' and not (progress[n] or requests[n]) then
    rows[#rows + 1] = status_code
  elseif status_code == OK and kind == 'complete' then
    rows[#rows + 1] = { status_code, id, false, progress[n], requests[n] }
  elseif status_code == OK then
    -- A retry applied now: the caller has the errors it sent; only the state is news.
    rows[#rows + 1] = { status_code, id, saved, progress[n], requests[n] }
  else
    rows[#rows + 1] = task_row(K, t, status_code, false)
  end
end
flush()
record_rates(K, now, counts)
prune_expired(K, now, result_ttl_ms, prune_batch)
return rows
