-- Make READY task `t` RUNNING as a worker's attempt under `token` (fresh,
-- from the caller's one HINCRBY for the whole batch): lease deadline,
-- attempts + 1, timestamps. Only the table changes: claim.lua takes the
-- batch out of READY, and writes its states, worker ids and indexes, in one
-- command each.
local function claim_task(t, now, lease_ms, token)
  t.status = 'RUNNING'
  t.token = token
  t.deadline = now + lease_ms
  t.sort = t.deadline
  t.attempts = t.attempts + 1
  t.last_attempted_at = now
  if t.started_at == nil then
    t.started_at = now
  end
end
