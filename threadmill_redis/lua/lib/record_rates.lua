--@include "lib/call_in_slices"
--@include "lib/rate_bucket"

-- Add `counts` (see tally) to the telemetry in the bucket of server time `now`
-- (see keys.py): one HINCRBY per queue and kind, however many tasks. Only a
-- call that starts a (bucket, queue) pair writes the index, and only then are
-- pairs older than the history deleted, oldest first, at most 100 more than
-- the call started: no call does unbounded work, and deletion keeps pace.
local function record_rates(K, now, counts)
  local bucket, history = rate_bucket(now)
  local started = {}
  for queue, kinds in pairs(counts) do
    local pair = string.format('%d|', bucket) .. queue
    local new = false
    for kind, n in pairs(kinds) do
      -- Counts are never zero, so a field's first increment is the only one returning n.
      if redis.call('HINCRBY', K.rates, pair .. '|' .. kind, n) == n then
        new = true
      end
    end
    if new then
      started[#started + 1] = bucket
      started[#started + 1] = pair
    end
  end
  if #started == 0 then
    return
  end
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
