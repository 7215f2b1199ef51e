-- Forgets one dispatch selected by mailbox_gc.lua, after checking again that it is still
-- collectable (a new observation may have raised its max offset or its last-seen time).
--
-- KEYS[1] dispatch HASH, KEYS[2] completed-chunks SET, KEYS[3] observations SET,
-- KEYS[4] sources ZSET, KEYS[5] src HASH, KEYS[6] seen ZSET, KEYS[7] work HASH
-- ARGV[1] dispatch id hex, ARGV[2] floor of the lane watermarks (watermarks never move back),
-- ARGV[3] cut-off ms (exclusive)
-- Reply: {'ok', 1 when collected else 0} or {'corrupt', reason}
local max = redis.call('HGET', KEYS[7], ARGV[1])
if not max then
  redis.call('ZREM', KEYS[6], ARGV[1])
  return {'ok', 0}
end
local m = tonumber(max)
if not m then
  return {'corrupt', 'dispatch ' .. ARGV[1] .. ' max offset ' .. max .. ' is not a number'}
end
local seen = redis.call('ZSCORE', KEYS[6], ARGV[1])
if m > tonumber(ARGV[2]) or (seen and tonumber(seen) >= tonumber(ARGV[3])) then
  return {'ok', 0}
end
for _, off in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if redis.call('HGET', KEYS[5], off) == ARGV[1] then
    redis.call('HDEL', KEYS[5], off)
    redis.call('ZREM', KEYS[4], off)
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[6], ARGV[1])
-- The work fields: the lanes the dispatch lists (a record of a small group has work in one or
-- two), or every lane for a dispatch an earlier release began, which lists none.
local fields = {ARGV[1], ARGV[1] .. ':lanes'}
local listed = redis.call('HGET', KEYS[7], ARGV[1] .. ':lanes')
if listed then
  for lane in string.gmatch(listed, '%d+') do
    fields[#fields + 1] = ARGV[1] .. ':' .. lane
  end
else
  for l = 0, 63 do
    fields[#fields + 1] = ARGV[1] .. ':' .. l
  end
end
redis.call('HDEL', KEYS[7], unpack(fields))
return {'ok', 1}
