--@include "lib/printable"
--@include "lib/record_rates"
--@include "lib/timed_member"

-- Quarantine task `id` of `queue`, whose stored state `raw` is corrupt (false
-- when missing; see lib/load_task): FAILED at server time `now_text`, in
-- FAILED's view and the finished index (and counted as finished in the
-- telemetry, K.rates and K.rate_index), with a TaskQuarantined error that
-- says what was wrong appended to its errors, its result dropped. Attempts
-- and timestamps are unknown and left empty; the payload is kept. The caller
-- has taken the task's member out of the segment view it was found in; this
-- takes its id out of the time indexes. A task whose payload is gone too has
-- no record left to mark: its state is deleted and the server log says so.
-- Returns whether the task was quarantined. Never fails: every value it
-- writes is made here.
local function quarantine_corrupt(K, id, queue, raw, now_text)
  redis.call('ZREM', K.due, id)
  redis.call('ZREM', K.leases, id)
  redis.call('ZREM', K.finished, id)
  if redis.call('HEXISTS', K.payload, id) == 0 then
    redis.call('HDEL', K.state, id)
    redis.log(redis.LOG_WARNING, 'threadmill: removed index entries of task ' .. printable(id)
      .. ' of queue ' .. printable(queue) .. ': no record is stored for it')
    return false
  end
  local what = 'its stored state is missing'
  if raw then
    what = 'its stored state is not valid: "' .. printable(raw) .. '"'
  end
  local failure = cjson.encode({
    exception_class_path = 'threadmill_core.errors.TaskQuarantined',
    message = 'the stored task record is corrupt, so the task cannot run: ' .. what,
    traceback = '',
  })
  local errors = redis.call('HGET', K.errors, id)
  if errors and string.match(errors, '^%[{.*}%]$') then
    errors = string.sub(errors, 1, -2) .. "," .. failure .. "]"
  else
    errors = "[" .. failure .. "]"
  end
  redis.call('HSET', K.errors, id, errors)
  redis.call('HDEL', K.result, id)
  redis.call('HSET', K.state, id, 'FAILED|0|0|' .. now_text .. '|||||' .. now_text .. '|||'
    .. queue)
  redis.call('ZADD', K.failed, '0', timed_member(queue, now_text, id))
  redis.call('ZADD', K.finished, now_text, id)
  record_rates(K, tonumber(now_text), { [queue] = { f = 1 } })
  redis.log(redis.LOG_WARNING, 'threadmill: quarantined task ' .. printable(id) .. ' of queue '
    .. printable(queue) .. ' as FAILED: ' .. what)
  return true
end
