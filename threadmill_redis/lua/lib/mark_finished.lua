-- Task `t`'s table as finalized `status` at `now`. The token is kept, which
-- is what lets a repeat be recognised.
local function mark_finished(t, status, now)
  t.status = status
  t.finished_at = now
  t.sort = now
  t.deadline = nil
end
