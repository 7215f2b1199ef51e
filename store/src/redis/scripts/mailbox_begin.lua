-- Records observations of dispatches in their shard log (begin_dispatch, begin_dispatches_fenced):
-- each as if alone, in order, so a duplicate after its first observation in one call gets that
-- observation's receipt. A refused observation writes nothing and does not stop the others.
--
-- KEYS[1] sources ZSET of the shard (member = score = offset)
-- KEYS[2] src HASH of the shard (offset -> dispatch id hex)
-- KEYS[3] seen ZSET of the shard (dispatch id hex, score = last observation ms)
-- KEYS[4] work HASH of the shard (<id> -> max observed offset, <id>:<lane> -> chunks not complete,
--   <id>:lanes -> the lanes with work, comma-separated: what watermark advances read)
-- KEYS[5] incarnation marker of the shard
-- KEYS[4 + 2i], KEYS[5 + 2i] (observation i, from 1): the dispatch HASH (manifest, digest,
--   canonical, seq, max, n:<lane> chunk counts) and its observations SET (offsets)
-- ARGV[1] fence (mailbox_fence_prelude.lua), ARGV[2] now ms, then per observation: dispatch id
-- hex, manifest blob, observed offset (decimal), seq if this is the first observation (decimal
-- u64), the manifest's digest (what chunk writes compare), the number k of lanes with work,
-- then k pairs lane, chunk count
-- Reply: {'lost'} (nothing written), {'corrupt', reason} (the arguments are malformed), or
-- {'ok', answer 1, answer 2, ...}, an answer per observation: {'ok', canonical offset, seq},
-- {'dispatch_conflict', reason} or {'corrupt', reason}
if not fence_holds(KEYS[5], ARGV[1]) then
  return {'lost'}
end
local now = ARGV[2]

local function begin_one(row_key, obs_key, id, manifest, offset, seq, digest, lanes)
  local other = redis.call('HGET', KEYS[2], offset)
  if other and other ~= id then
    return {'dispatch_conflict', 'offset ' .. offset .. ' was already observed as dispatch ' .. other}
  end
  local stored = redis.call('HGET', row_key, 'manifest')
  if stored then
    if stored ~= manifest then
      return {'dispatch_conflict', 'dispatch ' .. id .. ' arrived with a different manifest'}
    end
    local max = redis.call('HGET', row_key, 'max')
    local m = nil
    if max then
      m = tonumber(max)
      if not m then
        return {'corrupt', 'dispatch ' .. id .. ' max offset ' .. max .. ' is not a number'}
      end
    end
    -- A dispatch an earlier release began has no digest yet.
    redis.call('HSETNX', row_key, 'digest', digest)
    if not m or tonumber(offset) > m then
      redis.call('HSET', row_key, 'max', offset)
      redis.call('HSET', KEYS[4], id, offset)
    end
  else
    -- Two HSETs of every field at once (a dispatch has work in up to 64 lanes).
    local row = {'manifest', manifest, 'digest', digest, 'canonical', offset, 'seq', seq, 'max', offset}
    local work = {id, offset}
    local with_work = {}
    for j = 1, #lanes, 2 do
      row[#row + 1] = 'n:' .. lanes[j]
      row[#row + 1] = lanes[j + 1]
      work[#work + 1] = id .. ':' .. lanes[j]
      work[#work + 1] = lanes[j + 1]
      with_work[#with_work + 1] = lanes[j]
    end
    work[#work + 1] = id .. ':lanes'
    work[#work + 1] = table.concat(with_work, ',')
    redis.call('HSET', row_key, unpack(row))
    redis.call('HSET', KEYS[4], unpack(work))
  end
  redis.call('SADD', obs_key, offset)
  redis.call('ZADD', KEYS[1], offset, offset)
  redis.call('HSET', KEYS[2], offset, id)
  redis.call('ZADD', KEYS[3], now, id)
  if not stored then
    -- Just written: this observation is the canonical one.
    return {'ok', offset, seq}
  end
  local r = redis.call('HMGET', row_key, 'canonical', 'seq')
  return {'ok', r[1], r[2]}
end

-- The arguments are read whole before anything is written.
local observations = {}
local at = 3
while at <= #ARGV do
  local k = tonumber(ARGV[at + 5])
  if not k or at + 5 + 2 * k > #ARGV then
    return {'corrupt', 'observation ' .. (#observations + 1) .. ' has malformed arguments'}
  end
  local lanes = {}
  for j = 1, 2 * k do
    lanes[j] = ARGV[at + 5 + j]
  end
  observations[#observations + 1] = {ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4], lanes}
  at = at + 6 + 2 * k
end
if #KEYS ~= 5 + 2 * #observations then
  return {'corrupt', 'the keys do not match the observations'}
end
local answers = {'ok'}
for i, o in ipairs(observations) do
  answers[i + 1] = begin_one(KEYS[4 + 2 * i], KEYS[5 + 2 * i], o[1], o[2], o[3], o[4], o[5], o[6])
end
return answers
