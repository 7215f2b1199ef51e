-- Compare-and-set of a commit: one state transition, taken only if the commit is still exactly
-- what the caller read (so the transition happens once, from its predecessor). The `commit`
-- field holds the commit's head (all but the request, which `req` holds and never changes), so
-- what is compared and written is a few dozen bytes, not the payload.
--
-- KEYS[1]  the commit hash
-- ARGV[1]  the `commit` field the caller read (a head; an earlier release's whole commit blob)
-- ARGV[2]  the head to store
-- ARGV[3]  milliseconds of Redis TTL to set on the hash (0: leave it); a safety net only, the
--          auxiliary TTL is enforced by gc_committed_auxiliary on the injected clock
--
-- Replies: {'ok'} | {'conflict', reason} | {'notfound', reason}
local current = redis.call('HGET', KEYS[1], 'commit')
if not current then
  return {'notfound', 'no commit under this key'}
end
if current ~= ARGV[1] then
  return {'conflict', 'the commit changed since it was read'}
end
redis.call('HSET', KEYS[1], 'commit', ARGV[2])
local ttl = tonumber(ARGV[3])
if ttl and ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return {'ok'}
