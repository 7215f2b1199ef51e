-- Applies a membership change (already durable) to a conversation's member cache: a valid cache
-- takes the change; an invalid one is dropped. Either way the generation moves, so a fill that
-- read the durable table before the change can not land after it.
--
-- KEYS[1]  the cached members   ZSET
-- KEYS[2]  the cache marker     '<serving>'
-- KEYS[3]  the generation
-- ARGV[1]  'add' or 'remove'
-- ARGV[2..] the users (16-byte ids)
--
-- Reply: {'ok'}
redis.call('INCR', KEYS[3])
local run = serving()
if redis.call('GET', KEYS[2]) ~= run then
  redis.call('DEL', KEYS[1], KEYS[2])
  return {'ok'}
end
for i = 2, #ARGV do
  if ARGV[1] == 'add' then
    redis.call('ZADD', KEYS[1], 0, ARGV[i])
  else
    redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return {'ok'}
