--@include "lib/index_rate_pairs"
--@include "lib/rate_bucket"

-- lib/record_rates of one task of one kind ('e' or 'f') in `queue`, without the
-- tables: `now_text` is the server time `now` as decimal text (lib/now_ms).
local function record_rate(K, now, now_text, queue, kind)
  local pair = string.sub(now_text, 1, -4) .. '|' .. queue -- the bucket is the second
  if redis.call('HINCRBY', K.rates, pair .. '|' .. kind, '1') == 1 then
    local bucket, history = rate_bucket(now)
    index_rate_pairs(K, bucket, history, { bucket, pair })
  end
end
