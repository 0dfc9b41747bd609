-- The server's clock in whole milliseconds: the only clock threadmill trusts.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
