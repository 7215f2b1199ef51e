-- Reads whole event groups of one user with after < seq <= up_to, ascending, provided the trim
-- and the expired-gap boundary are still the ones the caller checked its cursor against (a
-- concurrent trim or gap raise may have removed groups in the range: the caller starts over).
--
-- KEYS[1] meta HASH, KEYS[2] seqs ZSET, KEYS[3] groups HASH
-- ARGV[1] expected trim, ARGV[2] expected gap (decimal, '' when unset), ARGV[3] after (seq8),
-- ARGV[4] up_to (seq8), ARGV[5] most groups
-- Reply: {'retry'} or {'ok', seq8, blob-or-nil, seq8, blob-or-nil, ...}
local m = redis.call('HMGET', KEYS[1], 'trim', 'gap')
if (m[1] or '') ~= ARGV[1] or (m[2] or '') ~= ARGV[2] then
  return {'retry'}
end
local seqs = redis.call('ZRANGEBYLEX', KEYS[2], '(' .. ARGV[3], '[' .. ARGV[4], 'LIMIT', 0, tonumber(ARGV[5]))
local out = {'ok'}
for _, s in ipairs(seqs) do
  out[#out + 1] = s
  out[#out + 1] = redis.call('HGET', KEYS[3], s)
end
return out
