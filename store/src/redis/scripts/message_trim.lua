-- Removes one record from the hot tier once it is archived (ADR-0019: trimming never drops
-- unarchived data), and raises the conversation's hot-tier lower bound.
--
-- KEYS[1]  the record hash          <ns>:{c:<tenant><conv>}:rec
-- KEYS[2]  the history index        <ns>:{c:<tenant><conv>}:idx
-- KEYS[3]  the hot-tier lower bound <ns>:{c:<tenant><conv>}:lowbound
-- KEYS[4]  the archived watermark   <ns>:{c:<tenant><conv>}:archived
-- ARGV[1]  the seq (decimal)
--
-- Replies:
--   {'trimmed'}     the record is gone from the hot tier (now or earlier: idempotent)
--   {'unarchived'}  the archive has not reached this seq yet: nothing changed
--   {'corrupt', reason}  a stored bound is not a number
local seq = tonumber(ARGV[1])
local raw_archived = redis.call('GET', KEYS[4]) or '0'
local archived = tonumber(raw_archived)
if not archived then
  return {'corrupt', 'archived watermark ' .. raw_archived .. ' is not a number'}
end
if seq > archived then
  return {'unarchived'}
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
local raw_low = redis.call('GET', KEYS[3]) or '0'
local low = tonumber(raw_low)
if not low then
  return {'corrupt', 'hot-tier lower bound ' .. raw_low .. ' is not a number'}
end
if seq > low then
  redis.call('SET', KEYS[3], ARGV[1])
end
return {'trimmed'}
