-- Claims a request key for one request in one conversation (the group-commit layout, message.rs:
-- "Commit layouts"), in the sender's slot: the claim decides which request and conversation own
-- the key, so the same key sent with other bytes, or to another conversation, is refused even
-- though the two commits would live in different slots.
--
-- KEYS[1]  the claim           <ns>:{k:<tenant><sender>}:claim:<client id>
-- KEYS[2]  the legacy commit   <ns>:{k:<tenant><sender>}:commit:<client id> (the sender-slot layout)
-- ARGV[1]  the claim's value: '<conversation hex>:<request digest hex>'
-- ARGV[2]  how long a new claim holds, ms (Redis's clock; it must outlive the commit)
--
-- Replies:
--   {'ok'}             the key is claimed for this request now
--   {'same'}           it already was (a retry, a racing attempt of the same request)
--   {'other', value}   another request or conversation holds it: nothing written
--   {'legacy'}         a commit of the sender-slot layout holds the key: it decides, nothing written
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {'legacy'}
end
local current = redis.call('GET', KEYS[1])
if not current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {'ok'}
end
if current == ARGV[1] then
  return {'same'}
end
return {'other', current}
