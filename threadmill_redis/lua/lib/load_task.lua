-- Task `id` as a table parsed from K.state, or nil when it is not stored.
-- The state string is eleven '|'-separated fields, then the queue name (last,
-- since it may itself contain '|'); empty fields are nil. `sort` is the
-- task's place in its segment, kept apart from the record's timestamps: the
-- entered-READY sequence (READY), or the due time (DEFERRED), lease deadline
-- (RUNNING) or finished time (terminal) that every scheduling decision reads.
local function load_task(K, id)
  local raw = redis.call('HGET', K.state, id)
  if not raw then
    return nil
  end
  local fields, from = {}, 1
  for i = 1, 11 do
    local sep = string.find(raw, '|', from, true)
    fields[i] = string.sub(raw, from, sep - 1)
    from = sep + 1
  end
  local function number(s)
    if s == '' then
      return nil
    end
    return tonumber(s)
  end
  local token = fields[11]
  if token == '' then
    token = nil
  end
  return {
    id = id,
    status = fields[1],
    priority = tonumber(fields[2]),
    attempts = tonumber(fields[3]),
    sort = number(fields[4]),
    enqueued_at = number(fields[5]),
    run_after = number(fields[6]),
    started_at = number(fields[7]),
    last_attempted_at = number(fields[8]),
    finished_at = number(fields[9]),
    deadline = number(fields[10]),
    token = token,
    queue = string.sub(raw, from),
  }
end
