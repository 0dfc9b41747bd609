--@include "lib/layout"
--@include "lib/parse_number"

-- The statuses a state may hold: anything else is a corrupt record.
local TASK_STATUSES = {
  READY = true, DEFERRED = true, RUNNING = true, SUCCESSFUL = true, FAILED = true,
  CANCELLED = true,
}

-- The fields of the packed state that are numbers (empty for none).
local STATE_NUMBERS = {
  'priority', 'attempts', 'sort', 'enqueued_at', 'run_after', 'started_at',
  'last_attempted_at', 'finished_at', 'deadline',
}

-- Task `id` as a table parsed from its packed state string `raw` (K.state's
-- value, laid out as STATE_PATTERN says), or nil when `raw` is corrupt (not
-- of that layout, a number field not digits, an unknown status): the one
-- structural check every script makes of what it reads before it writes.
-- Its fields are named as in STATE_FIELDS; empty fields are nil. `sort` is
-- the task's place in its segment, kept apart from the record's timestamps:
-- the entered-READY sequence (READY), or the due time (DEFERRED), lease
-- deadline (RUNNING) or finished time (terminal) that every scheduling
-- decision reads.
local function parse_task(id, raw)
  local f = { string.match(raw, STATE_PATTERN) }
  if not TASK_STATUSES[f[STATE.status]] then
    return nil
  end
  local t = { id = id, status = f[STATE.status], queue = f[STATE.queue] }
  if f[STATE.token] ~= '' then
    t.token = f[STATE.token]
  end
  for _, name in ipairs(STATE_NUMBERS) do
    t[name] = parse_number(f[STATE[name]])
  end
  return t
end
