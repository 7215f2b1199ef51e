-- Marks one chunk of a dispatch complete (idempotent) and counts down the lane's chunks not
-- yet complete in the shard's work hash.
--
-- KEYS[1] dispatch HASH, KEYS[2] completed-chunks SET of the dispatch, KEYS[3] work HASH of the
-- shard
-- ARGV[1] lane, ARGV[2] chunk index, ARGV[3] member '<lane>:<index>', ARGV[4] work field
-- '<id>:<lane>'
-- Reply: {'ok'}, {'not_found'}, {'invalid', lane chunk count} or {'corrupt', reason}
if redis.call('HEXISTS', KEYS[1], 'manifest') == 0 then
  return {'not_found'}
end
local n = redis.call('HGET', KEYS[1], 'n:' .. ARGV[1]) or '0'
local count = tonumber(n)
if not count then
  return {'corrupt', 'lane ' .. ARGV[1] .. ' chunk count ' .. n .. ' is not a number'}
end
if tonumber(ARGV[2]) >= count then
  return {'invalid', n}
end
local left = redis.call('HGET', KEYS[3], ARGV[4])
if left and not tonumber(left) then
  return {'corrupt', 'work count ' .. ARGV[4] .. ' = ' .. left .. ' is not a number'}
end
if redis.call('SADD', KEYS[2], ARGV[3]) == 1 then
  redis.call('HINCRBY', KEYS[3], ARGV[4], -1)
end
return {'ok'}
