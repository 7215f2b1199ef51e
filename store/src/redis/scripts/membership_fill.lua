-- Fills (part of) a conversation's member cache from the durable membership table, unless the
-- membership changed since the reader took the generation (then the reader's copy may be
-- stale: nothing is written), or another fill began after this one's first part (two fills'
-- parts never mix: the later one's first part takes the fill over).
--
-- KEYS[1]  the cached members   ZSET
-- KEYS[2]  the cache marker     '<serving>'
-- KEYS[3]  the generation
-- KEYS[4]  the fill under way   '<fill id>' (TTL: the marker's)
-- ARGV[1]  the generation the reader saw (before it read the durable table)
-- ARGV[2]  'first' (replace the set), 'more' (add), or 'last' (add, then mark valid); 'only' = first and last
-- ARGV[3]  the marker's TTL, ms
-- ARGV[4]  this fill's id (random)
-- ARGV[5..] members (16-byte user ids)
--
-- Replies: {'filled'} | {'raced'}
if (redis.call('GET', KEYS[3]) or '0') ~= ARGV[1] then
  return {'raced'}
end
local part = ARGV[2]
if part == 'first' or part == 'only' then
  redis.call('DEL', KEYS[1], KEYS[2])
  if part == 'first' then
    redis.call('SET', KEYS[4], ARGV[4], 'PX', ARGV[3])
  else
    redis.call('DEL', KEYS[4])
  end
elseif redis.call('GET', KEYS[4]) ~= ARGV[4] then
  return {'raced'}
end
for i = 5, #ARGV, 500 do
  local batch = {}
  for j = i, math.min(i + 499, #ARGV) do
    table.insert(batch, 0)
    table.insert(batch, ARGV[j])
  end
  redis.call('ZADD', KEYS[1], unpack(batch))
end
if part == 'last' or part == 'only' then
  redis.call('DEL', KEYS[4])
  local run = serving()
  redis.call('SET', KEYS[2], run, 'PX', ARGV[3])
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
end
return {'filled'}
