-- Each queue's prefix, made once per script call.
local queue_prefixes = {}

-- The prefix every segment member of `queue` starts with: its byte length in
-- 8 hex digits, then the name. Fixed-width lengths make the prefixes of two
-- queues never prefixes of each other, so one lex range holds exactly one queue.
local function queue_prefix(queue)
  local prefix = queue_prefixes[queue]
  if prefix == nil then
    prefix = string.format('%08x', #queue) .. queue
    queue_prefixes[queue] = prefix
  end
  return prefix
end
