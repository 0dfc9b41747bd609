-- A K.workers entry without its last worker id: entries are "<byte length>:<id>",
-- concatenated. An entry not of that layout (corrupt) is returned as it is:
-- callers have written already, so this must not fail.
local function without_last_worker(entries)
  local at, last = 1, 1
  while at <= #entries do
    last = at
    local colon = string.find(entries, ':', at, true)
    local length = colon and tonumber(string.sub(entries, at, colon - 1))
    if not length then
      return entries
    end
    at = colon + 1 + length
  end
  return string.sub(entries, 1, last - 1)
end
