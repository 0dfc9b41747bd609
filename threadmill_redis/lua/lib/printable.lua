-- Text safe to show in a message and a JSON string: at most 200 bytes of
-- `text`, every byte that is not printable ASCII as \xNN.
local function printable(text)
  return (string.gsub(string.sub(text, 1, 200), '[^%w%p ]', function(c)
    return string.format('\\x%02x', string.byte(c))
  end))
end
