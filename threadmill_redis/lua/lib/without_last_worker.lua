-- A K.workers entry without its last worker id: entries are "<byte length>:<id>",
-- concatenated.
local function without_last_worker(entries)
  local at, last = 1, 1
  while at <= #entries do
    last = at
    local colon = string.find(entries, ':', at, true)
    at = colon + 1 + tonumber(string.sub(entries, at, colon - 1))
  end
  return string.sub(entries, 1, last - 1)
end
