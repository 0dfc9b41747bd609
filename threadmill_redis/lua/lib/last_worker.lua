-- The last entry of a K.workers value (entries are "<byte length>:<id>",
-- concatenated), length prefix included, as lib/without_last_worker reads
-- them; nil for a value that is not such a list (never an error).
local function last_worker(entries)
  local at, last = 1, nil
  while at <= #entries do
    local colon = string.find(entries, ':', at, true)
    local length = colon and tonumber(string.sub(entries, at, colon - 1))
    if not length then
      return nil
    end
    last = string.sub(entries, at, colon + length)
    at = colon + 1 + length
  end
  if at ~= #entries + 1 then
    return nil
  end
  return last
end
