-- What K.starts holds for task `id` (see threadmill_redis.keys): how many
-- unstarted claims of it expired and were given back (a number), and who holds
-- its recorded start: the token of the worker claim whose start was recorded,
-- 'r' .. token for a reaper's claim, or '' (none recorded).
local function load_start(K, id)
  local raw = redis.call('HGET', K.starts, id)
  if not raw then
    return 0, ''
  end
  local count, claim = string.match(raw, '^(%d+)|(.*)$')
  if count == nil then -- corrupt: read as nothing recorded, so no caller fails on it
    return 0, ''
  end
  return tonumber(count), claim
end
