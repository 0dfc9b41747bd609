-- Reply status codes; replies.Status in Python mirrors this table (a test checks).
local function code(name)
  local codes = { OK = 0, REPEAT = 1, REFUSED = 2, NOT_FOUND = 3, EXISTS = 4 }
  return codes[name]
end
