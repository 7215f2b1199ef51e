-- Whether a conversation's hot tier is known to hold everything Redis was given since its
-- lease was installed: the lease is valid here (it names the copy of the data now served and the
-- counter exists; after a restart, failover, restore or flush it is not, until the next
-- revalidation).
--
-- KEYS[1]  the seq counter  <ns>:{c:<tenant><conv>}:seq
-- KEYS[2]  the lease        <ns>:{c:<tenant><conv>}:lease  '<serving>:<through>:<start>'
--
-- Reply: 1 (valid) | 0 | {'corrupt', reason}
-- (`number` and `valid_lease` come from lease_prelude.lua.)
local _, has_counter, bad = number(KEYS[1], 'seq counter')
if bad then return bad end
local through, _, bad_lease = valid_lease(KEYS[2], has_counter)
if bad_lease then return bad_lease end
if through then
  return 1
end
return 0
