-- Count every segment of every queue that holds at least one task; expired
-- results are not counted.
--
--   KEYS[1]  ready       ZSET view of READY (see lib/segment_member)
--   KEYS[2]  deferred    ZSET view of DEFERRED
--   KEYS[3]  running     ZSET view of RUNNING
--   KEYS[4]  successful  ZSET view of SUCCESSFUL
--   KEYS[5]  failed      ZSET view of FAILED
--   KEYS[6]  cancelled   ZSET view of CANCELLED
--   KEYS[7]  queues      HASH queue -> number of tasks stored
--   ARGV[1]  result_ttl_ms  result retention in milliseconds
--
-- Reply: seven entries per queue: name, then the READY, DEFERRED, RUNNING,
-- SUCCESSFUL, FAILED and CANCELLED counts.

--@include "lib/now_ms"
--@include "lib/queue_prefix"
--@include "lib/sort_bound"

--@keys
local result_ttl_ms = tonumber(ARGV[1])

local live_from = now_ms() - result_ttl_ms + 1
local reply = {}
for _, queue in ipairs(redis.call('HKEYS', K.queues)) do
  local prefix = queue_prefix(queue)
  local high = '(' .. prefix .. ':'
  local row, total = { queue }, 0
  for _, view in ipairs({ K.ready, K.deferred, K.running }) do
    row[#row + 1] = redis.call('ZLEXCOUNT', view, '[' .. prefix, high)
    total = total + row[#row]
  end
  for _, view in ipairs({ K.successful, K.failed, K.cancelled }) do
    row[#row + 1] = redis.call('ZLEXCOUNT', view, '[' .. sort_bound(queue, live_from), high)
    total = total + row[#row]
  end
  if total > 0 then
    for _, value in ipairs(row) do
      reply[#reply + 1] = value
    end
  end
end
return reply
