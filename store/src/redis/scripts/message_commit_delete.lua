-- Deletes a commit hash only if its `commit` field (the head) is still exactly what the caller
-- read (a COMMITTED commit past its auxiliary TTL); a key reused meanwhile is left alone.
--
-- KEYS[1]  the commit hash
-- ARGV[1]  the `commit` field the caller read
--
-- Replies: {'ok'} | {'conflict', reason} | {'notfound', reason}
local current = redis.call('HGET', KEYS[1], 'commit')
if not current then
  return {'notfound', 'no commit under this key'}
end
if current ~= ARGV[1] then
  return {'conflict', 'the commit changed since it was read'}
end
redis.call('DEL', KEYS[1])
return {'ok'}
