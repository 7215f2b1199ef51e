-- Records one observation of a dispatch in its shard log (begin_dispatch).
--
-- KEYS[1] dispatch HASH (manifest, digest, canonical, seq, max, n:<lane> chunk counts)
-- KEYS[2] observations SET of this dispatch (offsets)
-- KEYS[3] sources ZSET of the shard (member = score = offset)
-- KEYS[4] src HASH of the shard (offset -> dispatch id hex)
-- KEYS[5] seen ZSET of the shard (dispatch id hex, score = last observation ms)
-- KEYS[6] work HASH of the shard (<id> -> max observed offset, <id>:<lane> -> chunks not complete)
-- KEYS[7] incarnation marker of the shard
-- ARGV[1] dispatch id hex, ARGV[2] manifest blob, ARGV[3] observed offset (decimal),
-- ARGV[4] seq if this is the first observation (decimal u64), ARGV[5] now ms,
-- ARGV[6] fence (mailbox_fence_prelude.lua), ARGV[7] the manifest's digest (what chunk writes
-- compare), ARGV[8..] pairs lane, chunk count (lanes with work)
-- Reply: {'ok', canonical offset, seq}, {'lost'}, {'dispatch_conflict', reason} or
-- {'corrupt', reason}
if not fence_holds(KEYS[7], ARGV[6]) then
  return {'lost'}
end
local other = redis.call('HGET', KEYS[4], ARGV[3])
if other and other ~= ARGV[1] then
  return {'dispatch_conflict', 'offset ' .. ARGV[3] .. ' was already observed as dispatch ' .. other}
end
local stored = redis.call('HGET', KEYS[1], 'manifest')
if stored then
  if stored ~= ARGV[2] then
    return {'dispatch_conflict', 'dispatch ' .. ARGV[1] .. ' arrived with a different manifest'}
  end
  -- A dispatch an earlier release began has no digest yet.
  redis.call('HSETNX', KEYS[1], 'digest', ARGV[7])
  local max = redis.call('HGET', KEYS[1], 'max')
  local m = nil
  if max then
    m = tonumber(max)
    if not m then
      return {'corrupt', 'dispatch ' .. ARGV[1] .. ' max offset ' .. max .. ' is not a number'}
    end
  end
  if not m or tonumber(ARGV[3]) > m then
    redis.call('HSET', KEYS[1], 'max', ARGV[3])
    redis.call('HSET', KEYS[6], ARGV[1], ARGV[3])
  end
else
  -- Two HSETs of every field at once (a dispatch has work in up to 64 lanes).
  local row = {'manifest', ARGV[2], 'digest', ARGV[7], 'canonical', ARGV[3], 'seq', ARGV[4], 'max', ARGV[3]}
  local work = {ARGV[1], ARGV[3]}
  for i = 8, #ARGV, 2 do
    row[#row + 1] = 'n:' .. ARGV[i]
    row[#row + 1] = ARGV[i + 1]
    work[#work + 1] = ARGV[1] .. ':' .. ARGV[i]
    work[#work + 1] = ARGV[i + 1]
  end
  redis.call('HSET', KEYS[1], unpack(row))
  redis.call('HSET', KEYS[6], unpack(work))
end
redis.call('SADD', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[3])
redis.call('HSET', KEYS[4], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[5], ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'canonical', 'seq')
return {'ok', r[1], r[2]}
