-- Selects dispatches of one shard that every lane's watermark passed and that were last
-- observed before a cut-off; mailbox_gc_dispatch.lua then forgets each. Entries of `seen` whose
-- dispatch is gone are dropped on the way.
--
-- KEYS[1] seen ZSET, KEYS[2] watermarks HASH, KEYS[3] work HASH (<id> -> max observed offset)
-- ARGV[1] cut-off ms (exclusive), ARGV[2] limit, ARGV[3] most candidates inspected in one call
-- Reply: {'ok', floor, id...} ({'ok'} when some lane has no watermark) or {'corrupt', reason}
local limit = tonumber(ARGV[2])
if limit <= 0 then
  return {'ok'}
end
local lanes = {}
for l = 0, 63 do
  lanes[#lanes + 1] = tostring(l)
end
local floor = nil
local floor_text = nil
for i, w in ipairs(redis.call('HMGET', KEYS[2], unpack(lanes))) do
  if not w then
    return {'ok'}
  end
  local n = tonumber(w)
  if not n then
    return {'corrupt', 'lane ' .. (i - 1) .. ' watermark ' .. w .. ' is not a number'}
  end
  if floor == nil or n < floor then
    floor = n
    floor_text = w
  end
end
local out = {'ok', floor_text}
local candidates = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(candidates) do
  local max = redis.call('HGET', KEYS[3], id)
  if not max then
    redis.call('ZREM', KEYS[1], id)
  else
    local m = tonumber(max)
    if not m then
      return {'corrupt', 'dispatch ' .. id .. ' max offset ' .. max .. ' is not a number'}
    end
    if m <= floor then
      out[#out + 1] = id
      if #out - 2 >= limit then
        break
      end
    end
  end
end
return out
