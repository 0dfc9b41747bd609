--@include "lib/call_in_slices"

-- Index the (bucket, queue) pairs in `started` (bucket, pair, bucket, pair,
-- ...), the pairs whose telemetry a call has just begun; if any is new to
-- the index, delete pairs older than the history, oldest first, at most 100
-- more than were added: no call does unbounded work, and deletion keeps pace.
local function index_rate_pairs(K, bucket, history, started)
  local added = 0
  for _, n in ipairs(call_in_slices({ 'ZADD', K.rate_index, 'NX' }, started)) do
    added = added + n
  end
  if added == 0 then
    return
  end
  local old = redis.call('ZRANGEBYSCORE', K.rate_index, '-inf', bucket - history,
    'LIMIT', 0, added + 100)
  if #old == 0 then
    return
  end
  -- The oldest pairs hold the lowest ranks, so these are ranks 0 to #old - 1.
  redis.call('ZREMRANGEBYRANK', K.rate_index, 0, #old - 1)
  local fields = {}
  for _, pair in ipairs(old) do
    fields[#fields + 1] = pair .. '|e'
    fields[#fields + 1] = pair .. '|f'
  end
  call_in_slices({ 'HDEL', K.rates }, fields)
end
