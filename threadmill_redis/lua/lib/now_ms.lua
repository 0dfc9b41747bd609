-- The server's clock in whole milliseconds: the only clock threadmill trusts.
-- Also returns the same as decimal text, for scripts that store it: TIME's
-- seconds, then the first three digits of its microseconds padded to six.
local function now_ms()
  local t = redis.call('TIME')
  local text = t[1] .. string.sub('00000' .. t[2], -6, -4)
  return tonumber(text), text
end
