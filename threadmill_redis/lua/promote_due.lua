-- Move up to `limit` due DEFERRED tasks of any queue to READY, in DEFERRED
-- order (run_after, then id), then delete a bounded batch of expired results:
-- the maintenance loop's periodic pass.
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
--   KEYS[17] starts      HASH id -> "<unstarted expiries>|<claim>" (deleted with the task)
--   KEYS[18] rates       HASH telemetry: "<second>|<queue>|e" (or "|f") -> tasks entered (finished)
--   KEYS[19] rate_index  ZSET telemetry: "<second>|<queue>" -> second
--   KEYS[20] progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[21] cancel_requests HASH id -> when a cancel was requested (server ms)
--   ARGV[1]  limit          most tasks to promote
--   ARGV[2]  result_ttl_ms  result retention in milliseconds
--   ARGV[3]  prune_batch    most expired results to delete
--
-- Reply: {promoted count, queue names that received tasks...}; the caller
-- wakes those queues' workers (their notify keys are known only now).

--@include "lib/load_task"
--@include "lib/now_ms"
--@include "lib/promote_task"
--@include "lib/prune_expired"
--@include "lib/corrupt_queue"
--@include "lib/printable"
--@include "lib/quarantine_corrupt"
--@include "lib/timed_member"

--@keys
local limit = tonumber(ARGV[1])
local result_ttl_ms = tonumber(ARGV[2])
local prune_batch = tonumber(ARGV[3])

local now, now_text = now_ms()
local reply, seen = { 0 }, {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.due, '-inf', now, 'LIMIT', 0, limit)) do
  local t, corrupt = load_task(K, id)
  if t ~= nil and t.status == 'DEFERRED' then
    promote_task(K, t)
    reply[1] = reply[1] + 1
    if not seen[t.queue] then
      seen[t.queue] = true
      reply[#reply + 1] = t.queue
    end
  elseif t ~= nil then -- a stale entry: the task is elsewhere
    redis.call('ZREM', K.due, id)
  else
    -- A corrupt record. Its queue, if its state still names one, finds its
    -- member in DEFERRED's view (sorted by due time, this entry's score);
    -- else only this entry goes, and a claim of its queue meets the member.
    local queue = corrupt_queue(corrupt)
    if queue ~= nil then
      local due = redis.call('ZSCORE', K.due, id)
      redis.call('ZREM', K.deferred, timed_member(queue, tonumber(due), id))
      quarantine_corrupt(K, id, queue, corrupt, now_text)
    else
      redis.call('ZREM', K.due, id)
      redis.log(redis.LOG_WARNING, 'threadmill: removed the due entry of task ' .. printable(id)
        .. ': its stored state is ' .. (corrupt and 'not valid' or 'missing'))
    end
  end
end
prune_expired(K, now, result_ttl_ms, prune_batch)
return reply
