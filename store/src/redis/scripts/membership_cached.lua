-- Answers a membership question from a conversation's cached member set, when the cache is
-- valid: filled from the durable membership table in the copy of the data now served
-- (`serving()`), and not expired. Otherwise says so, with the cache's generation, which a fill must
-- still find unchanged (see membership_cache.rs).
--
-- KEYS[1]  the cached members   <ns>:{c:<tenant><conv>}:members   ZSET, member = 16-byte user id, score 0
-- KEYS[2]  the cache marker     <ns>:{c:<tenant><conv>}:memberscached   '<serving>' (Redis TTL)
-- KEYS[3]  the generation       <ns>:{c:<tenant><conv>}:membersgen      INCR on every change
-- ARGV[1]  'is_member' (ARGV[2] the user) or 'page' (ARGV[2] '' or the exclusive cursor, ARGV[3] the limit)
--
-- Replies: {'hit', 1|0} | {'hit', member, member, ...} | {'miss', generation}
local run = serving()
if redis.call('GET', KEYS[2]) ~= run then
  return {'miss', redis.call('GET', KEYS[3]) or '0'}
end
if ARGV[1] == 'is_member' then
  if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
    return {'hit', 1}
  end
  return {'hit', 0}
end
local min = '-'
if ARGV[2] ~= '' then
  min = '(' .. ARGV[2]
end
local page = redis.call('ZRANGEBYLEX', KEYS[1], min, '+', 'LIMIT', 0, tonumber(ARGV[3]))
table.insert(page, 1, 'hit')
return page
