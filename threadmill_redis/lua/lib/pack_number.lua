-- Number fields as packed: '%d', never tostring, which prints large numbers
-- in exponent form.
-- Fast path: memoized, as formatting is most of the cost of packing
-- and the tasks of a batch share most values (its time, lease deadline,
-- priority). The table lasts one script call: each call runs the script's
-- body, where this is inlined, afresh.
local packed_numbers = {}

-- Number `n` as a state field packs it; nil packs as ''.
local function pack_number(n)
  if n == nil then
    return ''
  end
  local text = packed_numbers[n]
  if text == nil then
    text = string.format('%d', n)
    packed_numbers[n] = text
  end
  return text
end
