--@include "lib/parse_number"

-- The statuses a state may hold: anything else is a corrupt record.
local TASK_STATUSES = {
  READY = true, DEFERRED = true, RUNNING = true, SUCCESSFUL = true, FAILED = true,
  CANCELLED = true,
}

-- Task `id` as a table parsed from its packed state string `raw` (K.state's
-- value), or nil when `raw` is corrupt (not of the layout below, a number
-- field not digits, an unknown status): the one structural check every
-- script makes of what it reads before it writes. The state string is
-- eleven '|'-separated fields, then the queue name (last, since it may
-- itself contain '|'); empty fields are nil. `sort` is the task's place in
-- its segment, kept apart from the record's timestamps: the entered-READY
-- sequence (READY), or the due time (DEFERRED), lease deadline (RUNNING) or
-- finished time (terminal) that every scheduling decision reads.
local function parse_task(id, raw)
  -- One match for the twelve fields, which also checks their shape (a loop
  -- of finds costs twice as much, and this runs once per task in every script).
  local status, priority, attempts, sort, enqueued_at, run_after, started_at,
    last_attempted_at, finished_at, deadline, token, queue = string.match(raw,
      '^(%u+)|(%-?%d+)|(%d+)|(%-?%d+)|(%d*)|(%d*)|(%d*)|(%d*)|(%d*)|(%d*)|([^|]*)|(.*)$')
  if not TASK_STATUSES[status] then
    return nil
  end
  return {
    id = id,
    status = status,
    priority = parse_number(priority),
    attempts = parse_number(attempts),
    sort = parse_number(sort),
    enqueued_at = parse_number(enqueued_at),
    run_after = parse_number(run_after),
    started_at = parse_number(started_at),
    last_attempted_at = parse_number(last_attempted_at),
    finished_at = parse_number(finished_at),
    deadline = parse_number(deadline),
    token = token ~= '' and token or nil,
    queue = queue,
  }
end
