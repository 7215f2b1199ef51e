-- Marks one chunk of a dispatch complete (idempotent) and counts completed chunks per lane.
--
-- KEYS[1] dispatch HASH, KEYS[2] completed-chunks SET of the dispatch
-- ARGV[1] lane, ARGV[2] chunk index, ARGV[3] member '<lane>:<index>'
-- Reply: {'ok'}, {'not_found'} or {'invalid', lane chunk count}
if redis.call('HEXISTS', KEYS[1], 'manifest') == 0 then
  return {'not_found'}
end
local n = redis.call('HGET', KEYS[1], 'n:' .. ARGV[1]) or '0'
if tonumber(ARGV[2]) >= tonumber(n) then
  return {'invalid', n}
end
if redis.call('SADD', KEYS[2], ARGV[3]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'c:' .. ARGV[1], 1)
end
return {'ok'}
