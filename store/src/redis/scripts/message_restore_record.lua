-- Restores one history record into the hot tier (rebuilding a conversation after Redis lost
-- state), with the claim of its request key while that claim would still hold. Writes nothing
-- that could resurrect a removed record or overwrite another.
--
-- KEYS[1]  the history index   <ns>:{c:<tenant><conversation>}:idx  (ZSET, member = score = seq)
-- KEYS[2]  the records         <ns>:{c:<tenant><conversation>}:rec  (HASH seq -> record blob)
-- KEYS[3]  the hot-tier lower bound <ns>:{c:<tenant><conversation>}:lowbound (absent = 0)
-- KEYS[4]  the expiry drain's tombstones <ns>:{c:<tenant><conversation>}:gcdone
-- KEYS[5]  the claims          <ns>:{c:<tenant><conversation>}:claims      (see message_allocate_seq.lua)
-- KEYS[6]  the claims by time  <ns>:{c:<tenant><conversation>}:claimtimes
-- KEYS[7]  the conversation's clock <ns>:{c:<tenant><conversation>}:clock (raised to ARGV[4],
--          so a conversation rebuilt after a loss issues no created_at below its records')
-- ARGV[1]  the seq, decimal
-- ARGV[2]  the canonical record blob
-- ARGV[3]  the record's claim: '<sender hex>:<client message id>'
-- ARGV[4]  the record's created_at, ms
-- ARGV[5]  now, ms (the store's clock)
-- ARGV[6]  how long a claim holds, ms
--
-- Replies: {'restored'} | {'present'} (the same bytes were there) | {'removed', reason} (trimmed
-- or drained: not written) | {'conflict', reason} (the seq holds another record) | {'corrupt', reason}
local seq = ARGV[1]
if not string.match(seq, '^[1-9][0-9]*$') then
  return {'corrupt', 'seq ' .. seq .. ' is not a positive decimal'}
end
-- The record's created_at was issued whatever becomes of the record here: the clock covers it.
local clock = tonumber(redis.call('GET', KEYS[7]) or '0')
if not clock then
  return {'corrupt', 'the conversation clock is not a number'}
end
if tonumber(ARGV[4]) > clock then
  redis.call('SET', KEYS[7], ARGV[4])
end
local function claim()
  local life = tonumber(ARGV[6])
  if tonumber(ARGV[4]) + life > tonumber(ARGV[5]) and redis.call('HEXISTS', KEYS[5], ARGV[3]) == 0 then
    redis.call('HSET', KEYS[5], ARGV[3], seq .. ':' .. ARGV[4])
    redis.call('ZADD', KEYS[6], ARGV[4], ARGV[3])
    redis.call('PEXPIRE', KEYS[5], string.format('%d', 2 * life))
    redis.call('PEXPIRE', KEYS[6], string.format('%d', 2 * life))
  end
end
local existing = redis.call('HGET', KEYS[2], seq)
if existing then
  if existing == ARGV[2] then
    claim()
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
claim()
return {'restored'}
