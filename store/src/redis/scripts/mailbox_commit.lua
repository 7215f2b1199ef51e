-- Commits one user's retention meta and event groups (append_batch, append_chunk, and the lazy
-- ledger inspection of range_scan). The ledger math is done by the caller; this script is the
-- optimistic check-and-set: it applies only if the meta generation is still the one the caller
-- read, and answers {'retry'} otherwise.
--
-- KEYS[1] meta HASH   (gen, trim, gap, ledger)
-- KEYS[2] groups HASH (seq8 -> event group blob)
-- KEYS[3] seqs ZSET   (seq8 members, score 0, read by lex range)
-- KEYS[4] exp ZSET    (seq8 members, score = expiry in ms)
-- ARGV[1] expected generation ('0' when the meta does not exist)
-- ARGV[2] the generation to write: fresh and random (decimal, never '0'), so a generation names
--         one content even after Redis rolled back (a counter could repeat with other
--         contents), and a caller may plan on the meta it wrote last without reading it again
-- ARGV[3] new expired-gap boundary (decimal u64) or '' to leave it
-- ARGV[4] new ledger blob
-- ARGV[5] now (ms, from the store's clock): groups expired at now are dropped (the ledger the
--         caller computed at the same now has already merged their buckets into the gap)
-- ARGV[6] lifetime (ms) the group keys must keep at least: until the latest live bucket expires,
--         plus a day of slack for clock skew; '' when no bucket is live. Only ever extended (an
--         hour beyond it, see below), so an idle user's groups vanish from Redis after everything
--         in them expired (the meta, with its trim, gap and ledger, stays).
-- ARGV[7..] triples: seq8, expiry ms, blob
local gen = redis.call('HGET', KEYS[1], 'gen') or '0'
if gen ~= ARGV[1] then
  return {'retry', gen}
end
redis.call('HSET', KEYS[1], 'gen', ARGV[2], 'ledger', ARGV[4])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'gap', ARGV[3])
end
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', ARGV[5])
for from = 1, #dead, 1000 do
  local some = {unpack(dead, from, math.min(from + 999, #dead))}
  redis.call('HDEL', KEYS[2], unpack(some))
  redis.call('ZREM', KEYS[3], unpack(some))
end
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[5])
end
-- The groups with one command per key (a batch brings a user several), at most 1000 groups
-- per command (Lua bounds how many arguments one call may unpack).
for from = 7, #ARGV, 3000 do
  local blobs, seqs, expiries = {}, {}, {}
  for i = from, math.min(from + 2999, #ARGV), 3 do
    blobs[#blobs + 1] = ARGV[i]
    blobs[#blobs + 1] = ARGV[i + 2]
    seqs[#seqs + 1] = 0
    seqs[#seqs + 1] = ARGV[i]
    expiries[#expiries + 1] = ARGV[i + 1]
    expiries[#expiries + 1] = ARGV[i]
  end
  redis.call('HSET', KEYS[2], unpack(blobs))
  redis.call('ZADD', KEYS[3], unpack(seqs))
  redis.call('ZADD', KEYS[4], unpack(expiries))
end
-- A key short of `keep` is extended an hour beyond it, so the commits of the next hour find it
-- long enough and only read its TTL (extending to exactly `keep` rewrote it at every commit:
-- `keep` shrinks as `now` moves on, and the TTL with it).
local keep = tonumber(ARGV[6])
if keep then
  for k = 2, 4 do
    local left = redis.call('PTTL', KEYS[k])
    if left == -1 or (left >= 0 and left < keep) then
      redis.call('PEXPIRE', KEYS[k], keep + 3600000)
    end
  end
end
return {'ok'}
