-- Deletes a request key's claim (message_claim.lua) only if it still holds the caller's value:
-- a claim taken again meanwhile (a reuse of the key) is left alone.
--
-- KEYS[1]  the claim   <ns>:{k:<tenant><sender>}:claim:<client id>
-- ARGV[1]  the value the caller expects
--
-- Replies: {'ok'} (deleted, or already gone) | {'conflict', reason}
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then
  return {'conflict', 'the claim was taken again'}
end
redis.call('DEL', KEYS[1])
return {'ok'}
