-- Forgets dispatches of one shard that every lane's watermark passed and that were last
-- observed before a cut-off.
--
-- KEYS[1] seen ZSET, KEYS[2] watermarks HASH, KEYS[3] sources ZSET, KEYS[4] src HASH
-- ARGV[1] cut-off ms (exclusive), ARGV[2] limit, ARGV[3] dispatch key prefix of the shard,
-- ARGV[4] most candidates inspected in one call
-- Reply: how many were collected
local limit = tonumber(ARGV[2])
if limit <= 0 then
  return 0
end
local lanes = {}
for l = 0, 63 do
  lanes[#lanes + 1] = tostring(l)
end
local floor = nil
for _, w in ipairs(redis.call('HMGET', KEYS[2], unpack(lanes))) do
  if not w then
    return 0
  end
  local n = tonumber(w)
  if floor == nil or n < floor then
    floor = n
  end
end
local collected = 0
local candidates = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(candidates) do
  local key = ARGV[3] .. id
  local max = redis.call('HGET', key, 'max')
  if not max then
    redis.call('ZREM', KEYS[1], id)
  elseif tonumber(max) <= floor then
    for _, off in ipairs(redis.call('SMEMBERS', key .. ':obs')) do
      if redis.call('HGET', KEYS[4], off) == id then
        redis.call('HDEL', KEYS[4], off)
        redis.call('ZREM', KEYS[3], off)
      end
    end
    redis.call('DEL', key, key .. ':done', key .. ':obs')
    redis.call('ZREM', KEYS[1], id)
    collected = collected + 1
    if collected >= limit then
      break
    end
  end
end
return collected
