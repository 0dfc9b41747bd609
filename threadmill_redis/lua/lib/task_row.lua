-- The reply row for task `t`: {code, id, state, payload, errors, workers,
-- result, progress, cancel request}, absent values as nil. The payload is sent only when asked, since
-- callers that hold the lease already have it.
local function task_row(K, t, status_code, with_payload)
  local payload = false
  if with_payload then
    payload = redis.call('HGET', K.payload, t.id)
  end
  return {
    status_code, t.id, redis.call('HGET', K.state, t.id), payload,
    redis.call('HGET', K.errors, t.id), redis.call('HGET', K.workers, t.id),
    redis.call('HGET', K.result, t.id), redis.call('HGET', K.progress, t.id),
    redis.call('HGET', K.cancel_requests, t.id),
  }
end
