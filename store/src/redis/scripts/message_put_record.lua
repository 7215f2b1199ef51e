-- Writes one history record and its index entry (same-value overwrite: a retried step writes
-- the same bytes again).
--
-- KEYS[1]  the history index   <ns>:{c:<tenant><conversation>}:idx  (ZSET, member = score = seq)
-- KEYS[2]  the records         <ns>:{c:<tenant><conversation>}:rec  (HASH seq -> record blob)
-- ARGV[1]  the seq, decimal
-- ARGV[2]  the canonical record blob
--
-- Replies: {'ok'} | {'corrupt', reason} | {'conflict', reason} (the seq already holds another
-- record: two writers were handed one seq, and the second must never overwrite the first)
local seq = ARGV[1]
if not string.match(seq, '^[1-9][0-9]*$') then
  return {'corrupt', 'seq ' .. seq .. ' is not a positive decimal'}
end
local existing = redis.call('HGET', KEYS[2], seq)
if existing and existing ~= ARGV[2] then
  return {'conflict', 'seq ' .. seq .. ' already holds another record; refusing to overwrite it'}
end
redis.call('HSET', KEYS[2], seq, ARGV[2])
redis.call('ZADD', KEYS[1], seq, seq)
return {'ok'}
