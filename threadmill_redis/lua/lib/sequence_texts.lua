-- An entered-READY sequence number `seq` (1 or more) in two pieces of text
-- twice over: as a state holds it ('%d', lib/new_state's sort_text), head ..
-- tail, and as its READY member does ('%016d', lib/ready_member), padded_head
-- .. padded_tail. A batch's tasks take consecutive numbers, and a
-- string.format (glibc's sprintf) is one of the costliest steps of a task's
-- Lua: so the digits above the last two are formatted once per hundred
-- numbers, the last two are two characters, and the caller joins the pieces
-- into the strings it makes anyway, so no string is made for the number alone.
-- The memo lasts one script call, as the script's body runs afresh each call.
local seq_hundreds, seq_head, seq_padded_head = -1, '', ''

local function sequence_texts(seq)
  if seq < 100 then -- no hundreds: the plain text has no leading zero
    return '', string.format('%d', seq), '00000000000000', string.format('%02d', seq)
  end
  local last = seq % 100
  local hundreds = (seq - last) / 100
  if hundreds ~= seq_hundreds then
    seq_hundreds = hundreds
    seq_head, seq_padded_head = string.format('%d', hundreds), string.format('%014d', hundreds)
  end
  local ones = last % 10
  local digits = string.char(48 + (last - ones) / 10, 48 + ones) -- 48 is '0'
  return seq_head, digits, seq_padded_head, digits
end
