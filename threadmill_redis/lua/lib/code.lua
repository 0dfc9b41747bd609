-- Reply status codes; replies.Status in Python mirrors this table (a test checks).
local CODES = { OK = 0, REPEAT = 1, REFUSED = 2, NOT_FOUND = 3, EXISTS = 4, CHANGED = 5 }
local function code(name)
  return CODES[name]
end
