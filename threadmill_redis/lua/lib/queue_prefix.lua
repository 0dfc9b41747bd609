--@include "lib/layout"

-- Each queue's prefix, made once per script call.
local queue_prefixes = {}

-- The prefix every segment member of `queue` starts with: its byte length in
-- QUEUE_LENGTH_DIGITS hex digits, then the name. Fixed-width lengths make the
-- prefixes of two queues never prefixes of each other, so one lex range holds
-- exactly one queue.
local function queue_prefix(queue)
  local prefix = queue_prefixes[queue]
  if prefix == nil then
    prefix = string.format(QUEUE_LENGTH_FORMAT, #queue) .. queue
    queue_prefixes[queue] = prefix
  end
  return prefix
end
