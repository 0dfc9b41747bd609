-- Store the progress running tasks reported: for each update whose token is
-- the RUNNING task's current token, K.progress becomes the update's progress
-- stamped with the server's time. Nothing else changes: not the state, the
-- deadline, nor any view.
--
--   KEYS[1]  state     HASH id -> packed task state (see lib/parse_task)
--   KEYS[2]  progress  HASH id -> the last progress stored, codec bytes
--   ARGV[1]  id      the first update's task
--   ARGV[2]  token   its lease's token
--   ARGV[3]  head    its progress's codec bytes up to the value of updated_at,
--                    the last key (`threadmill_redis.arguments.progress_head`):
--                    the server time and '}' complete them
--   ARGV[4..] three more per further update: id, token, head
--
-- Reply: one code per update, in order: OK, or REFUSED (a stale token, a
-- task not RUNNING or not stored). Of a task updated twice, the last
-- accepted progress is kept.

--@include "lib/code"
--@include "lib/load_task"
--@include "lib/now_ms"

--@keys
local OK, REFUSED = code('OK'), code('REFUSED')

local _, now_text = now_ms()
local stamp = now_text .. '}'
local replies = {}
for i = 1, #ARGV, 3 do
  local id, token = ARGV[i], ARGV[i + 1]
  local t = load_task(K, id)
  if t ~= nil and t.status == 'RUNNING' and t.token == token then
    redis.call('HSET', K.progress, id, ARGV[i + 2] .. stamp)
    replies[#replies + 1] = OK
  else
    replies[#replies + 1] = REFUSED
  end
end
return replies
