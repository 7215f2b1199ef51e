-- RESERVED -> RECORDED of a commit in its conversation's slot (the group-commit layout): the
-- record and its index entry are written and the commit's head compared and set in one step,
-- so no record is ever written for a commit that is not exactly the caller's RESERVED one.
--
-- KEYS[1]  the commit    <ns>:{c:<tenant><conv>}:commit:<sender hex>:<client id>
-- KEYS[2]  the records   <ns>:{c:<tenant><conv>}:rec
-- KEYS[3]  the index     <ns>:{c:<tenant><conv>}:idx
-- ARGV[1]  the RESERVED head the caller read;  ARGV[2] the RECORDED head to store
-- ARGV[3]  the seq, decimal;  ARGV[4] the record
--
-- Replies: {'ok'} | {'conflict', reason} | {'notfound', reason}
local current = redis.call('HGET', KEYS[1], 'commit')
if not current then
  return {'notfound', 'no commit under this key'}
end
if current ~= ARGV[1] then
  return {'conflict', 'the commit changed since it was read'}
end
local existing = redis.call('HGET', KEYS[2], ARGV[3])
if existing and existing ~= ARGV[4] then
  return {'conflict', 'seq ' .. ARGV[3] .. ' already holds another record; refusing to overwrite it'}
end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[3])
redis.call('HSET', KEYS[1], 'commit', ARGV[2])
return {'ok'}
