-- Restores one history record from qim.messages.v1 into the hot tier (rebuild after Redis lost
-- state). Writes nothing that could resurrect a removed record or overwrite another.
--
-- KEYS[1]  the history index   <ns>:{c:<tenant><conversation>}:idx  (ZSET, member = score = seq)
-- KEYS[2]  the records         <ns>:{c:<tenant><conversation>}:rec  (HASH seq -> record blob)
-- KEYS[3]  the hot-tier lower bound <ns>:{c:<tenant><conversation>}:lowbound (absent = 0)
-- KEYS[4]  the expiry drain's tombstones <ns>:{c:<tenant><conversation>}:gcdone
-- ARGV[1]  the seq, decimal
-- ARGV[2]  the canonical record blob
--
-- Replies: {'restored'} | {'present'} (the same bytes were there) | {'removed', reason} (trimmed
-- or drained: not written) | {'conflict', reason} (the seq holds another record) | {'corrupt', reason}
local seq = ARGV[1]
if not string.match(seq, '^[1-9][0-9]*$') then
  return {'corrupt', 'seq ' .. seq .. ' is not a positive decimal'}
end
local existing = redis.call('HGET', KEYS[2], seq)
if existing then
  if existing == ARGV[2] then
    return {'present'}
  end
  return {'conflict', 'seq ' .. seq .. ' already holds another record; refusing to overwrite it'}
end
local low = tonumber(redis.call('GET', KEYS[3]) or '0')
if not low then
  return {'corrupt', 'the hot-tier lower bound is not a number'}
end
if tonumber(seq) <= low then
  return {'removed', 'seq ' .. seq .. ' is at or below the hot-tier lower bound'}
end
if redis.call('SISMEMBER', KEYS[4], seq) == 1 then
  return {'removed', 'the expiry drain deleted seq ' .. seq}
end
redis.call('HSET', KEYS[2], seq, ARGV[2])
redis.call('ZADD', KEYS[1], seq, seq)
return {'restored'}
