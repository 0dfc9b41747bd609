-- Store one new task, as enqueue.lua stores a batch of one: the usual call
-- (Broker.enqueue), in the fewest steps. Setting its payload only if absent
-- both stores it and tests the id.
--
-- Keys: enqueue.lua's, with the notify list of the task's queue last.
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
--   KEYS[13] notify      LIST wake-up tokens of the task's queue
-- Arguments, each as the caller's client writes it (integers in decimal):
--   ARGV[1]  notify_cap  most wake-up tokens a notify list keeps
--   ARGV[2]  id
--   ARGV[3]  payload bytes
--   ARGV[4]  queue
--   ARGV[5]  priority
--   ARGV[6]  run_after ms, '' for none
--
-- Reply: as enqueue.lua's for one record: the server time in ms, then the
-- bare code OK for a new task (DEFERRED when run_after is later than that
-- time, else READY), or the stored row (lib/task_row) with code EXISTS.
--
-- Costs: eight commands for a new task (TIME, HSETNX, HSET, ZADD, HINCRBY of
-- the sequence for READY or a second ZADD for DEFERRED, HINCRBY of its
-- queue's size and of its telemetry, LLEN), an LPUSH when a worker waits. No
-- more is made than those need: most of a small script's time is its own
-- Lua, not its commands.

--@include "lib/code"
--@include "lib/new_state"
--@include "lib/notify_room"
--@include "lib/now_ms"
--@include "lib/ready_member"
--@include "lib/record_rate"
--@include "lib/timed_member"
--@include "lib/task_row"

--@keys
local id, queue, priority_text, run_after_text = ARGV[2], ARGV[4], ARGV[5], ARGV[6]
local now, now_text = now_ms()
if redis.call('HSETNX', K.payload, id, ARGV[3]) == 0 then
  return { now, task_row(K, { id = id }, code('EXISTS'), true) }
end

local run_after = tonumber(run_after_text)
if run_after ~= nil and run_after > now then
  redis.call('HSET', K.state, id,
    new_state('DEFERRED', priority_text, run_after_text, now_text, run_after_text, queue))
  redis.call('ZADD', K.deferred, '0', timed_member(queue, run_after, id))
  redis.call('ZADD', K.due, run_after_text, id)
else
  local seq = redis.call('HINCRBY', K.counters, 'seq', '1')
  redis.call('HSET', K.state, id,
    new_state('READY', priority_text, string.format('%d', seq), now_text, run_after_text, queue))
  redis.call('ZADD', K.ready, '0', ready_member(queue, tonumber(priority_text), seq, id))
end
redis.call('HINCRBY', K.queues, queue, '1')
record_rate(K, now, now_text, queue, 'e')
-- One wake-up, for a deferred task too: an idle worker then asks when the
-- next task falls due (next_due.lua) and claims it on time.
notify_room(K.notify, 1, tonumber(ARGV[1]))
return { now, code('OK') }
