-- Advances one lane's watermark towards an observed offset over at most ARGV[3] sources: when
-- every source above the current watermark and at or below `through` has its lane work complete.
-- Never moves back. When more sources lie below `through` than one call inspects, the watermark
-- moves to the last source inspected (all of them complete) and the caller calls again.
--
-- KEYS[1] watermarks HASH (lane -> offset), KEYS[2] sources ZSET, KEYS[3] src HASH,
-- KEYS[4] work HASH (<id> -> max observed offset, <id>:<lane> -> chunks of the lane not complete)
-- KEYS[5] incarnation marker of the shard
-- ARGV[1] lane, ARGV[2] through (decimal offset), ARGV[3] most sources inspected, ARGV[4] fence
-- (mailbox_fence_prelude.lua)
-- Reply: {'ok', through}, {'more', watermark}, {'lost'}, {'invalid'}, {'conflict', offset} or
-- {'corrupt', reason}
if not fence_holds(KEYS[5], ARGV[4]) then
  return {'lost'}
end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local through = tonumber(ARGV[2])
if cur then
  local c = tonumber(cur)
  if not c then
    return {'corrupt', 'lane ' .. ARGV[1] .. ' watermark ' .. cur .. ' is not a number'}
  end
  if through <= c then
    return {'ok', cur}
  end
end
if not redis.call('HGET', KEYS[3], ARGV[2]) then
  return {'invalid'}
end
local min = '-inf'
if cur then
  min = '(' .. cur
end
local offs = redis.call('ZRANGEBYSCORE', KEYS[2], min, ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for _, off in ipairs(offs) do
  local id = redis.call('HGET', KEYS[3], off)
  if not id then
    return {'corrupt', 'source offset ' .. off .. ' names no dispatch'}
  end
  if not redis.call('HGET', KEYS[4], id) then
    return {'corrupt', 'source offset ' .. off .. ' names dispatch ' .. id .. ' which is gone'}
  end
  local left = redis.call('HGET', KEYS[4], id .. ':' .. ARGV[1])
  if left then
    local n = tonumber(left)
    if not n then
      return {'corrupt', 'dispatch ' .. id .. ' lane ' .. ARGV[1] .. ' work count ' .. left .. ' is not a number'}
    end
    if n > 0 then
      return {'conflict', off}
    end
  end
end
if #offs >= tonumber(ARGV[3]) and offs[#offs] ~= ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], offs[#offs])
  return {'more', offs[#offs]}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'ok', ARGV[2]}
