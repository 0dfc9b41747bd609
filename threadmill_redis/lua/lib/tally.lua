-- Count one task of `queue` as entered ('e') or finished ('f') in `counts`,
-- a table of the script call (counts[queue][kind] = tasks) that
-- record_rates writes once at the end, so the cost is per queue, not per task.
local function tally(counts, queue, kind)
  local of_queue = counts[queue]
  if of_queue == nil then
    of_queue = {}
    counts[queue] = of_queue
  end
  of_queue[kind] = (of_queue[kind] or 0) + 1
end
