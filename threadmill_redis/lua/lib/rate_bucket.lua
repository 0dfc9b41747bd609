-- The telemetry bucket holding server time `now` (ms): its second since the
-- epoch. Also returns how many buckets the history keeps: an hour of seconds,
-- threadmill_core.backend.RATE_HISTORY (a test checks that they agree).
local function rate_bucket(now)
  return math.floor(now / 1000), 3600
end
