-- HMGET of `fields` of hash `key`, for a list of any length (in slices of
-- 1,000, as lib/call_in_slices): the values in the order given, false for a
-- field that is not there.
local function hmget_all(key, fields)
  if #fields == 0 then
    return {}
  elseif #fields <= 1000 then -- the usual case: one call, nothing copied
    return redis.call('HMGET', key, unpack(fields))
  end
  local values = {}
  for from = 1, #fields, 1000 do
    local slice = { 'HMGET', key }
    for i = from, math.min(from + 999, #fields) do
      slice[#slice + 1] = fields[i]
    end
    for _, value in ipairs(redis.call(unpack(slice))) do
      values[#values + 1] = value
    end
  end
  return values
end
