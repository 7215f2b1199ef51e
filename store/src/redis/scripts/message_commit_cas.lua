-- Compare-and-set of a commit blob: one state transition, taken only if the commit is still
-- exactly what the caller read (so the transition happens once, from its predecessor).
--
-- KEYS[1]  the commit hash
-- ARGV[1]  the commit blob the caller read
-- ARGV[2]  the commit blob to store
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
