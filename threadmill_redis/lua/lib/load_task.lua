--@include "lib/parse_task"

-- Task `id` as a table read from K.state (see lib/parse_task), or nil when it
-- is not stored or its state is corrupt; then also the stored state (false
-- when there is none), for lib/quarantine_corrupt.
local function load_task(K, id)
  local raw = redis.call('HGET', K.state, id)
  if not raw then
    return nil, false
  end
  local t = parse_task(id, raw)
  return t, t == nil and raw
end
