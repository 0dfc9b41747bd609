-- The reaper's pass over RUNNING tasks whose lease deadline has passed, oldest
-- first over all queues (then by id). A task held by a worker's claim whose
-- start was never recorded goes back to READY with that claim undone
-- (lib/give_back) and its count of such give-backs one higher; it is not
-- returned and does not count toward `limit`. Any other (a recorded start, a
-- lapsed reaper claim) gets a fresh token and the deadline now + claim_ms, so no
-- other pass decides it, and is returned; an undecided claim lapses like any
-- lease and is taken up again. A reaper claim is not an attempt: attempts,
-- worker ids and last_attempted_at are unchanged. A task with a cancel
-- request is finalized CANCELLED instead, whatever its claim (an unstarted
-- worker's claim undone and counted as a give-back first), its token
-- cleared; it is not returned and does not count toward `limit`. The pass
-- stops at its `limit`-th claim.
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
--   KEYS[17] starts      HASH id -> "<unstarted expiries>|<claim>" (see lib/load_start)
--   KEYS[18] rates       HASH telemetry: "<second>|<queue>|e" (or "|f") -> tasks entered (finished)
--   KEYS[19] rate_index  ZSET telemetry: "<second>|<queue>" -> second
--   KEYS[20] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[21] cancel_requests HASH id -> when a cancel was requested (server ms)
--   ARGV[1]  limit            most tasks to claim
--   ARGV[2]  claim_ms         claim length in milliseconds
--   ARGV[3]  nonce            random text unique to this call, no '|' (see lib/new_token)
--
-- Reply: first the queue of each task given back (a list, one entry per
-- task, for the caller to wake their workers), then one OK row per claimed
-- task, oldest deadline first, payload included (lib/task_row).

--@include "lib/code"
--@include "lib/give_back"
--@include "lib/index_task"
--@include "lib/load_start"
--@include "lib/load_task"
--@include "lib/mark_finished"
--@include "lib/record_rates"
--@include "lib/tally"
--@include "lib/new_token"
--@include "lib/member_id"
--@include "lib/member_queue"
--@include "lib/now_ms"
--@include "lib/corrupt_queue"
--@include "lib/printable"
--@include "lib/quarantine_corrupt"
--@include "lib/timed_member"
--@include "lib/save_start"
--@include "lib/save_task"
--@include "lib/task_row"
--@include "lib/unindex_task"

--@keys
local limit = tonumber(ARGV[1])
local claim_ms = tonumber(ARGV[2])
local nonce = ARGV[3]

local now, now_text = now_ms()
local given_back, counts = {}, {}
local reply, claimed = { given_back }, 0
-- A lease is valid before its deadline and expired from it on. Each task met
-- leaves the expired range (given back, or claimed until later), so asking
-- again finds the next ones; given-back tasks do not use up `limit`.
while claimed < limit do
  local ids = redis.call('ZRANGEBYSCORE', K.leases, '-inf', now, 'LIMIT', 0, limit - claimed)
  if #ids == 0 then
    break
  end
  for _, id in ipairs(ids) do
    local t, corrupt = load_task(K, id)
    if t == nil or t.status ~= 'RUNNING' then
      -- A stale entry (the task is elsewhere), or a corrupt record: quarantined,
      -- its member in RUNNING's view found from the queue its state still
      -- names, or else among the view's members (RUNNING is small).
      local deadline = redis.call('ZSCORE', K.leases, id)
      redis.call('ZREM', K.leases, id)
      if t == nil then
        local queue, member = corrupt_queue(corrupt), nil
        if queue ~= nil then
          member = timed_member(queue, tonumber(deadline), id)
        else
          for _, held in ipairs(redis.call('ZRANGE', K.running, 0, -1)) do
            if member_id(held) == id then
              member = held
              queue = member_queue(held)
            end
          end
        end
        if member ~= nil then
          redis.call('ZREM', K.running, member)
          quarantine_corrupt(K, id, queue, corrupt, now_text)
        else
          redis.log(redis.LOG_WARNING, 'threadmill: removed the lease of task ' .. printable(id)
            .. ', whose stored state is ' .. (corrupt and 'not valid' or 'missing')
            .. ' and which is in no segment')
        end
      end
    else
      local count, claim = load_start(K, id)
      local unstarted = claim ~= t.token and claim ~= 'r' .. t.token
      if unstarted and give_back(K, t, nil, now) then -- had a cancel request
        save_start(K, id, count + 1, '')
        tally(counts, t.queue, 'f')
      elseif unstarted then
        save_start(K, id, count + 1, '')
        given_back[#given_back + 1] = t.queue
      elseif redis.call('HEXISTS', K.cancel_requests, id) == 1 then
        unindex_task(K, t)
        mark_finished(t, 'CANCELLED', now)
        t.token = nil
        save_task(K, t)
        index_task(K, t)
        save_start(K, id, count, '')
        tally(counts, t.queue, 'f')
      else
        unindex_task(K, t)
        t.token = new_token(K, nonce)
        t.deadline = now + claim_ms
        t.sort = t.deadline
        save_task(K, t)
        index_task(K, t)
        save_start(K, id, count, 'r' .. t.token)
        claimed = claimed + 1
        reply[claimed + 1] = task_row(K, t, code('OK'), true)
      end
    end
  end
end
record_rates(K, now, counts)
return reply
