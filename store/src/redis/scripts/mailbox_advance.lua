-- Advances one lane's watermark to an observed offset when every source above the current
-- watermark and at or below it has its lane work complete. Never moves back.
--
-- KEYS[1] watermarks HASH (lane -> offset), KEYS[2] sources ZSET, KEYS[3] src HASH
-- ARGV[1] lane, ARGV[2] through (decimal offset), ARGV[3] dispatch key prefix of the shard
-- (every dispatch key shares the shard's hash tag, so it lives in this slot)
-- Reply: {'ok', through}, {'invalid'}, {'conflict', offset} or {'corrupt', offset}
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and tonumber(ARGV[2]) <= tonumber(cur) then
  return {'ok', cur}
end
if not redis.call('HGET', KEYS[3], ARGV[2]) then
  return {'invalid'}
end
local min = '-inf'
if cur then
  min = '(' .. cur
end
local need_field = 'n:' .. ARGV[1]
local done_field = 'c:' .. ARGV[1]
for _, off in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], min, ARGV[2])) do
  local id = redis.call('HGET', KEYS[3], off)
  if not id then
    return {'corrupt', off}
  end
  local r = redis.call('HMGET', ARGV[3] .. id, 'canonical', need_field, done_field)
  if not r[1] then
    return {'corrupt', off}
  end
  if tonumber(r[3] or '0') < tonumber(r[2] or '0') then
    return {'conflict', off}
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'ok', ARGV[2]}
