-- Number fields as parsed.
-- Fast path: memoized for the script call as lib/pack_number's
-- are: the tasks of a batch share most values, and tonumber is the cost.
local parsed_numbers = {}

-- A state field's number; an empty field is nil.
local function parse_number(text)
  local n = parsed_numbers[text]
  if n == nil and text ~= '' then
    n = tonumber(text)
    parsed_numbers[text] = n
  end
  return n
end
