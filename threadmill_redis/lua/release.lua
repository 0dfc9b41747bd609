-- Give back claimed tasks that never started (a worker's prefetch at a
-- graceful shutdown): each RUNNING task whose token is the caller's goes to
-- the tail of READY with its claim undone (attempts - 1, the last worker id
-- dropped, and started_at / last_attempted_at cleared when no attempt is
-- left). The token is cleared, so a repeat after a lost reply, and any later
-- use of the lease, is refused and changes nothing.
--
--   KEYS[1]  payload     HASH id -> the record as enqueued (codec bytes, opaque here)
--   KEYS[2]  state       HASH id -> packed task state (see lib/parse_task)
--   KEYS[3]  errors      HASH id -> encoded errors
--   KEYS[4]  workers     HASH id -> encoded worker ids
--   KEYS[5]  result      HASH id -> encoded return value
--   KEYS[6]  ready       ZSET view of READY (see lib/segment_member)
--   KEYS[7]  deferred    ZSET view of DEFERRED
--   KEYS[8]  running     ZSET view of RUNNING
--   KEYS[9]  successful  ZSET view of SUCCESSFUL
--   KEYS[10] failed      ZSET view of FAILED
--   KEYS[11] cancelled   ZSET view of CANCELLED
--   KEYS[12] due         ZSET DEFERRED ids by run_after ms
--   KEYS[13] leases      ZSET RUNNING ids by lease deadline ms
--   KEYS[14] finished    ZSET terminal ids by finished_at ms
--   KEYS[15] counters    HASH seq and token counters
--   KEYS[16] queues      HASH queue -> number of tasks stored
--   ARGV[1]  id     the first lease's task
--   ARGV[2]  token  that lease's token
--   ARGV[3..] two more per further lease: id, token
--
-- Reply: per lease, in order, an OK row with payload (lib/task_row), or
-- REFUSED (only code and id). The caller wakes the queues' workers.

--@include "lib/code"
--@include "lib/enter_ready"
--@include "lib/index_task"
--@include "lib/load_task"
--@include "lib/save_task"
--@include "lib/task_row"
--@include "lib/unindex_task"

--@keys

-- The workers entry without its last id: entries are "<byte length>:<id>".
local function without_last(entries)
  local at, last = 1, 1
  while at <= #entries do
    last = at
    local colon = string.find(entries, ':', at, true)
    at = colon + 1 + tonumber(string.sub(entries, at, colon - 1))
  end
  return string.sub(entries, 1, last - 1)
end

local rows = {}
for i = 1, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local t = load_task(K, id)
  if t == nil or t.status ~= 'RUNNING' or t.token ~= token then
    rows[#rows + 1] = { code('REFUSED'), id }
  else
    unindex_task(K, t)
    enter_ready(K, t)
    t.deadline = nil
    t.token = nil
    t.attempts = math.max(t.attempts - 1, 0)
    if t.attempts == 0 then
      t.started_at = nil
      t.last_attempted_at = nil
    end
    local workers = redis.call('HGET', K.workers, id)
    if workers then
      local kept = without_last(workers)
      if kept == '' then
        redis.call('HDEL', K.workers, id)
      else
        redis.call('HSET', K.workers, id, kept)
      end
    end
    save_task(K, t)
    index_task(K, t)
    rows[#rows + 1] = task_row(K, t, code('OK'), true)
  end
end
return rows
