--@include "lib/layout"
--@include "lib/pack_number"

-- Task `t`'s state packed in the layout lib/parse_task reads (STATE_FIELDS
-- in order, joined by '|'; nil packs as ''), also kept as `t.saved` so a
-- reply can carry the state without reading it back.
local function pack_task(t)
  local fields = {}
  for n, name in ipairs(STATE_FIELDS) do
    local value = t[name]
    if type(value) == 'number' then
      value = pack_number(value)
    end
    fields[n] = value or ''
  end
  t.saved = table.concat(fields, '|')
  return t.saved
end
