--@include "lib/pack_number"

-- The packed state (lib/parse_task's layout) of READY task state `raw` once
-- claimed at server time `now_text` under `token` until `deadline_text` (all
-- decimal text): RUNNING, attempts + 1, sort and deadline at the lease's end,
-- last attempted now, started now unless started before, the token set.
-- Also returns the task's queue. Nil when `raw` is not a READY state of that
-- layout (corrupt: lib/parse_task's check, made by the one match). It works
-- on the string, not on a table from lib/parse_task: a claim runs this for
-- every task it grants, and the table's fields cost more than the rest of
-- the claim's Lua together.
local function claimed_state(raw, now_text, deadline_text, token)
  local priority, attempts, kept, started_at, finished_at, queue = string.match(raw,
    '^READY|(%-?%d+)|(%d+)|%-?%d+|(%d*|%d*)|(%d*)|%d*|(%d*)|%d*|[^|]*|(.*)$')
  if priority == nil then
    return nil
  end
  if started_at == '' then
    started_at = now_text
  end
  return 'RUNNING|' .. priority .. '|' .. pack_number(tonumber(attempts) + 1) .. '|'
    .. deadline_text .. '|' .. kept .. '|' .. started_at .. '|' .. now_text .. '|'
    .. finished_at .. '|' .. deadline_text .. '|' .. token .. '|' .. queue, queue
end
