-- Task `t`'s state packed in the layout lib/parse_task reads, also kept as
-- `t.saved` so a reply can carry the state without reading it back.
local function pack_task(t)
  local function field(n)
    if n == nil then
      return ''
    end
    -- '%d', never tostring: tostring prints large numbers in exponent form.
    return string.format('%d', n)
  end
  t.saved = table.concat({
    t.status, field(t.priority), field(t.attempts), field(t.sort),
    field(t.enqueued_at), field(t.run_after), field(t.started_at),
    field(t.last_attempted_at), field(t.finished_at), field(t.deadline),
    t.token or '', t.queue,
  }, '|')
  return t.saved
end
