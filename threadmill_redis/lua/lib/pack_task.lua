--@include "lib/pack_number"

-- Task `t`'s state packed in the layout lib/parse_task reads, also kept as
-- `t.saved` so a reply can carry the state without reading it back.
local function pack_task(t)
  t.saved = t.status .. '|' .. pack_number(t.priority) .. '|' .. pack_number(t.attempts) .. '|'
    .. pack_number(t.sort) .. '|' .. pack_number(t.enqueued_at) .. '|' .. pack_number(t.run_after)
    .. '|' .. pack_number(t.started_at) .. '|' .. pack_number(t.last_attempted_at) .. '|'
    .. pack_number(t.finished_at) .. '|' .. pack_number(t.deadline) .. '|' .. (t.token or '')
    .. '|' .. t.queue
  return t.saved
end
