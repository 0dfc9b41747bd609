-- Whether task `t` is a terminal result older than the retention `ttl_ms`
-- (gone for every reader, even before prune_expired deletes it).
local function is_expired(t, now, ttl_ms)
  return (t.status == 'SUCCESSFUL' or t.status == 'FAILED' or t.status == 'CANCELLED')
    and t.sort <= now - ttl_ms
end
