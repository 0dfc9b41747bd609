-- Read the telemetry: tasks that entered and finished each queue over the
-- last `window_ms`, that is in the bucket holding now and the buckets before
-- it, back over window_ms rounded up to whole buckets (at most the history
-- kept). Reads only the pairs of the window; changes nothing.
--
--   KEYS[1]  rates       HASH "<second>|<queue>|e" or "|f" -> tasks entered or finished
--   KEYS[2]  rate_index  ZSET "<second>|<queue>" -> second, per pair counted
--   ARGV[1]  window_ms   the window in milliseconds, positive
--
-- Reply: three entries per queue that has a pair in the window: name, then
-- tasks entered, then tasks finished.

--@include "lib/call_in_slices"
--@include "lib/now_ms"
--@include "lib/rate_bucket"

--@keys
local window_ms = tonumber(ARGV[1])

local bucket, history = rate_bucket(now_ms())
local count = math.min(math.ceil(window_ms / 1000), history)
local found = redis.call('ZRANGEBYSCORE', K.rate_index,
  string.format('(%d', bucket - count), string.format('%d', bucket))
local fields = {}
for _, pair in ipairs(found) do
  fields[#fields + 1] = pair .. '|e'
  fields[#fields + 1] = pair .. '|f'
end
local values = {}
for _, slice in ipairs(call_in_slices({ 'HMGET', K.rates }, fields)) do
  for _, value in ipairs(slice) do
    values[#values + 1] = tonumber(value) or 0
  end
end
local totals, reply = {}, {}
for i, pair in ipairs(found) do
  -- The second is digits, so the first '|' ends it; the queue may hold '|' itself.
  local queue = string.sub(pair, string.find(pair, '|', 1, true) + 1)
  local row = totals[queue]
  if row == nil then
    row = { queue, 0, 0 }
    totals[queue] = row
  end
  row[2] = row[2] + values[2 * i - 1]
  row[3] = row[3] + values[2 * i]
end
for _, row in pairs(totals) do
  reply[#reply + 1] = row[1]
  reply[#reply + 1] = row[2]
  reply[#reply + 1] = row[3]
end
return reply
