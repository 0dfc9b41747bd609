-- A fencing token no task of this namespace ever had, even after its data
-- was rolled back (a restore from a snapshot, a failover to a replica that
-- lost writes): the next number of a counter stored with the data, then '-'
-- and `nonce`, random text the client chose for this script call. The
-- counter keeps a call's tokens apart; the nonce, those of calls whose
-- counter a rollback made repeat.
local function new_token(K, nonce)
  return string.format('%d', redis.call('HINCRBY', K.counters, 'token', 1)) .. '-' .. nonce
end
