-- Whether task `id` still holds the stored state and payload its caller read
-- and decoded before this call (`state` and `payload`, as `get` answered
-- them). A script cannot decode the codec's bytes, so an operator's action
-- reads and decodes the record first and sends what it read: the action
-- applies only to the bytes that decoded, never to poison, and a task that
-- changed (or was deleted) in between answers CHANGED for the caller to read
-- again. Every change of a task's place rewrites its state (a fresh sequence,
-- time or token), so equal bytes are the same task in the same place.
local function unchanged(K, id, state, payload)
  return redis.call('HGET', K.state, id) == state and redis.call('HGET', K.payload, id) == payload
end
