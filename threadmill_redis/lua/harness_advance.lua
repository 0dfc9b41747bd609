-- TEST SUPPORT ONLY, never run by RedisBackend: make the namespace behave as
-- if the server clock moved forward by delta_ms, by moving every scheduling
-- key (due times, lease deadlines, finished times: t.sort, see lib/parse_task)
-- back by delta_ms and re-indexing each task with the same functions the
-- operations use. Relative orders are kept; the timestamps a record shows are
-- not touched, just as a moving clock would not change them. Telemetry ages
-- too: every bucket moves back by delta_ms rounded up to whole seconds (a
-- bucket keeps no finer time), so whole seconds are exact. Used by
-- threadmill_redis.testing.make_harness; O(tasks + telemetry pairs).
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
--   KEYS[17] rates       HASH telemetry: "<second>|<queue>|e" (or "|f") -> tasks entered (finished)
--   KEYS[18] rate_index  ZSET telemetry: "<second>|<queue>" -> second
--   KEYS[19] live_worker_expiry  ZSET live worker id -> expiry ms (see register_worker)
--   ARGV[1]  delta_ms  how far the clock moves, in milliseconds
--
-- Reply: the number of tasks shifted (those not READY).

--@include "lib/call_in_slices"
--@include "lib/index_task"
--@include "lib/load_task"
--@include "lib/member_id"
--@include "lib/member_queue"
--@include "lib/save_task"
--@include "lib/timed_member"
--@include "lib/unindex_task"

--@keys
local delta_ms = tonumber(ARGV[1])

local shifted = 0
for _, id in ipairs(redis.call('HKEYS', K.state)) do
  local t = load_task(K, id)
  -- READY's sort key is a sequence number, not a time. A corrupt record is
  -- left as it is, but for its time index entries (below).
  if t ~= nil and t.status ~= 'READY' then
    unindex_task(K, t)
    t.sort = t.sort - delta_ms
    save_task(K, t)
    index_task(K, t)
    shifted = shifted + 1
  end
end
-- The time index entries and view members of tasks with no valid state
-- move as the others' do, so a corrupt record falls due, expires and ages
-- like its neighbours.
for _, index in ipairs({ K.due, K.leases, K.finished }) do
  for _, id in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    if load_task(K, id) == nil then
      redis.call('ZINCRBY', index, -delta_ms, id)
    end
  end
end
for _, view in ipairs({ K.deferred, K.running, K.successful, K.failed, K.cancelled }) do
  for _, member in ipairs(redis.call('ZRANGE', view, 0, -1)) do
    local id = member_id(member)
    if load_task(K, id) == nil then
      local queue, at = member_queue(member) -- at: the sort key's first digit
      local sort = tonumber(string.sub(member, at, at + SORT_KEY_DIGITS - 1)) - delta_ms
      redis.call('ZREM', view, member)
      redis.call('ZADD', view, '0', timed_member(queue, sort, id))
    end
  end
end
-- Rebuilt rather than renamed in place, so a moved pair never meets one not yet moved.
local seconds = math.ceil(delta_ms / 1000)
local function moved(name) -- "<second>|..." with the second moved back
  local sep = string.find(name, '|', 1, true)
  return string.format('%d', tonumber(string.sub(name, 1, sep - 1)) - seconds)
    .. string.sub(name, sep)
end
local index = redis.call('ZRANGE', K.rate_index, 0, -1, 'WITHSCORES')
if seconds > 0 and #index > 0 then
  local counts = redis.call('HGETALL', K.rates)
  redis.call('DEL', K.rate_index, K.rates)
  local members, fields = {}, {}
  for i = 1, #index, 2 do
    members[#members + 1] = tonumber(index[i + 1]) - seconds
    members[#members + 1] = moved(index[i])
  end
  for i = 1, #counts, 2 do
    fields[#fields + 1] = moved(counts[i])
    fields[#fields + 1] = counts[i + 1]
  end
  call_in_slices({ 'ZADD', K.rate_index }, members)
  call_in_slices({ 'HSET', K.rates }, fields)
end
-- Live workers' entries expire as leases do.
for _, id in ipairs(redis.call('ZRANGE', K.live_worker_expiry, 0, -1)) do
  redis.call('ZINCRBY', K.live_worker_expiry, -delta_ms, id)
end
return shifted
