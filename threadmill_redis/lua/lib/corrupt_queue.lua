-- The queue a corrupt state `raw` (false when missing) still names: its last
-- field, when it keeps the layout's twelve fields (lib/parse_task); else nil.
local function corrupt_queue(raw)
  if not raw then
    return nil
  end
  return string.match(raw,
    '^[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(.+)$')
end
