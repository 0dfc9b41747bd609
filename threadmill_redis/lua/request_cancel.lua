-- Ask the holder of a RUNNING task's lease to stop it: K.cancel_requests
-- notes when (server ms), unless a request is noted already (the first one
-- wins). Nothing else changes: not the state, the token, the deadline, nor
-- any view. Not fenced by a token: an operator's call.
--
--   KEYS[1]  payload          HASH id -> the record as enqueued (codec bytes, opaque here)
--   KEYS[2]  state            HASH id -> packed task state (see lib/parse_task)
--   KEYS[3]  errors           HASH id -> encoded errors
--   KEYS[4]  workers          HASH id -> encoded worker ids
--   KEYS[5]  result           HASH id -> encoded return value
--   KEYS[6]  progress         HASH id -> the last progress stored, codec bytes
--   KEYS[7]  cancel_requests  HASH id -> when a cancel was requested, server ms
--   ARGV[1]  id       the task
--   ARGV[2]  state    its stored state as the caller read it (see lib/unchanged)
--   ARGV[3]  payload  its stored payload as the caller read and decoded it
--
-- Reply: an OK row with payload (lib/task_row); REFUSED (only code and id)
-- for a task that is not RUNNING (READY and DEFERRED ones are cancelled by
-- cancel.lua); NOT_FOUND (only code and id) for an unknown task; CHANGED
-- (only code and id), changing nothing, when the task's stored state or
-- payload is no longer what the caller read.

--@include "lib/code"
--@include "lib/load_task"
--@include "lib/now_ms"
--@include "lib/task_row"
--@include "lib/unchanged"

--@keys
local id = ARGV[1]

if not unchanged(K, id, ARGV[2], ARGV[3]) then
  return { code('CHANGED'), id }
end

local t = load_task(K, id)
if t == nil then
  return { code('NOT_FOUND'), id }
end
if t.status ~= 'RUNNING' then
  return { code('REFUSED'), id }
end
local _, now_text = now_ms()
redis.call('HSETNX', K.cancel_requests, id, now_text)
return task_row(K, t, code('OK'), true)
