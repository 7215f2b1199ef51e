-- Raises one user's trim (the caller computed max(trim, through)) and removes every group at or
-- below it; check-and-set on the meta generation like mailbox_commit.lua.
--
-- KEYS[1] meta HASH, KEYS[2] groups HASH, KEYS[3] seqs ZSET, KEYS[4] exp ZSET
-- ARGV[1] expected generation, ARGV[2] new trim (decimal u64), ARGV[3] new trim (seq8),
-- ARGV[4] the generation to write (fresh and random, as mailbox_commit.lua's)
local gen = redis.call('HGET', KEYS[1], 'gen') or '0'
if gen ~= ARGV[1] then
  return {'retry', gen}
end
redis.call('HSET', KEYS[1], 'gen', ARGV[4], 'trim', ARGV[2])
local dead = redis.call('ZRANGEBYLEX', KEYS[3], '-', '[' .. ARGV[3])
for _, s in ipairs(dead) do
  redis.call('HDEL', KEYS[2], s)
  redis.call('ZREM', KEYS[4], s)
end
if #dead > 0 then
  redis.call('ZREMRANGEBYLEX', KEYS[3], '-', '[' .. ARGV[3])
end
return {'ok'}
