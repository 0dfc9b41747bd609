--@include "lib/index_rate_pairs"
--@include "lib/pack_number"
--@include "lib/rate_bucket"

-- Add `counts` (see tally) to the telemetry in the bucket of server time `now`
-- (see keys.py): one HINCRBY per queue and kind, however many tasks. Only a
-- call that starts a (bucket, queue) pair writes the index (index_rate_pairs).
local function record_rates(K, now, counts)
  local bucket, history = rate_bucket(now)
  local started = {}
  for queue, kinds in pairs(counts) do
    local pair = string.format('%d|', bucket) .. queue
    local new = false
    for kind, n in pairs(kinds) do
      -- Counts are never zero, so a field's first increment is the only one returning n.
      if redis.call('HINCRBY', K.rates, pair .. '|' .. kind, pack_number(n)) == n then
        new = true
      end
    end
    if new then
      started[#started + 1] = bucket
      started[#started + 1] = pair
    end
  end
  if #started > 0 then
    index_rate_pairs(K, bucket, history, started)
  end
end
