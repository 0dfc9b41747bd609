--@include "lib/parse_task"

-- Task `id` as a table read from K.state (see lib/parse_task), or nil when it
-- is not stored.
local function load_task(K, id)
  local raw = redis.call('HGET', K.state, id)
  if not raw then
    return nil
  end
  return parse_task(id, raw)
end
