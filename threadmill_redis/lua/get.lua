-- Read one task's stored record, unless it is an expired result.
--
--   KEYS[1]  payload     HASH id -> the record as enqueued (codec bytes, opaque here)
--   KEYS[2]  state       HASH id -> packed task state (see lib/parse_task)
--   KEYS[3]  errors      HASH id -> encoded errors
--   KEYS[4]  workers     HASH id -> encoded worker ids
--   KEYS[5]  result      HASH id -> encoded return value
--   KEYS[6]  progress        HASH id -> the last progress stored (codec bytes)
--   KEYS[7]  cancel_requests HASH id -> when a cancel was requested (server ms)
--   ARGV[1]  id             the task
--   ARGV[2]  result_ttl_ms  result retention in milliseconds
--
-- Reply: an OK row with payload (lib/task_row), or nil when the task is
-- unknown or its result expired; a corrupt state answers its row as stored.

--@include "lib/code"
--@include "lib/is_expired"
--@include "lib/load_task"
--@include "lib/now_ms"
--@include "lib/task_row"

--@keys
local id = ARGV[1]
local result_ttl_ms = tonumber(ARGV[2])

local t, corrupt = load_task(K, id)
if corrupt then -- answered as stored: the caller says what is wrong
  return task_row(K, { id = id }, code('OK'), true)
end
if t == nil or is_expired(t, now_ms(), result_ttl_ms) then
  return false
end
return task_row(K, t, code('OK'), true)
