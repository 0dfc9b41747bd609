-- Write task `t` back to K.state in the layout load_task reads. The packed
-- string is also kept as `t.saved`, so a reply can carry the state without
-- reading it back.
local function save_task(K, t)
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
  redis.call('HSET', K.state, t.id, t.saved)
end
