-- Record that claimed tasks began to run (a worker's start marks): for each
-- lease whose token is the RUNNING task's current token and a worker's claim
-- (not a reaper's), K.starts notes that token as started. Marking again is
-- answered OK and changes nothing. Nothing else changes: not the state, not
-- the deadline, not any view.
--
--   KEYS[1]  state   HASH id -> packed task state (see lib/parse_task)
--   KEYS[2]  starts  HASH id -> "<unstarted expiries>|<claim>" (see lib/load_start)
--   ARGV[1]  id     the first lease's task
--   ARGV[2]  token  that lease's token
--   ARGV[3..] two more per further lease: id, token
--
-- Reply: one code per lease, in order: OK, or REFUSED (a stale token, a
-- reaper's lease, a task not RUNNING or not stored).

--@include "lib/code"
--@include "lib/load_start"
--@include "lib/load_task"
--@include "lib/save_start"

--@keys
local OK, REFUSED = code('OK'), code('REFUSED')

-- Redis refuses a script's first write, when it is over its maxmemory, if
-- that write could grow memory (a script without a shebang: fakeredis runs
-- none), and lets every later one through. So the first write is one that
-- cannot grow it, and the marks of a worker at maxmemory still land: it keeps
-- draining the queue. (No task has the empty id.)
redis.call('HDEL', K.starts, '')
local replies = {}
for i = 1, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local t = load_task(K, id)
  local answer = REFUSED
  if t ~= nil and t.status == 'RUNNING' and t.token == token then
    local count, claim = load_start(K, id)
    if claim == token then
      answer = OK
    elseif claim ~= 'r' .. token then
      save_start(K, id, count, token)
      answer = OK
    end
  end
  replies[#replies + 1] = answer
end
return replies
