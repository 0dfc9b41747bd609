--@include "lib/parse_number"

-- Task `id` as a table parsed from its packed state string `raw` (K.state's
-- value). The state string is eleven '|'-separated fields, then the queue
-- name (last, since it may itself contain '|'); empty fields are nil. `sort`
-- is the task's place in its segment, kept apart from the record's
-- timestamps: the entered-READY sequence (READY), or the due time
-- (DEFERRED), lease deadline (RUNNING) or finished time (terminal) that
-- every scheduling decision reads.
local function parse_task(id, raw)
  -- One match for the twelve fields (a loop of finds costs twice as much,
  -- and this runs once per task in every script).
  local status, priority, attempts, sort, enqueued_at, run_after, started_at,
    last_attempted_at, finished_at, deadline, token, queue = string.match(raw,
      '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
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
