-- Marks chunks of dispatches of one shard complete (idempotent) and counts down, in the shard's
-- work hash, each lane's chunks not yet complete. Every chunk is checked before any is marked.
-- The reads and writes of one dispatch's chunks are one call each, not one per chunk: its row
-- (begun? the lanes' chunk counts) with one HMGET, its completed chunks with one SADD.
--
-- KEYS[1] work HASH of the shard; KEYS[2] incarnation marker of the shard; KEYS[2k+1],
-- KEYS[2k+2] dispatch HASH and completed-chunks SET of the k-th dispatch named (k = 1, 2, ...)
-- ARGV[1] fence (mailbox_fence_prelude.lua); ARGV[2..] quadruples: k, lane, chunk index, work
-- field '<id>:<lane>'
-- Reply: {'ok'}, {'lost'}, {'not_found', k}, {'invalid', quadruple number (from 1)} or
-- {'corrupt', reason}
if not fence_holds(KEYS[2], ARGV[1]) then
  return {'lost'}
end
-- Per dispatch k: its quadruples' positions, and the lanes' chunk-count fields.
local of = {}
local work_fields = {}
for i = 2, #ARGV, 4 do
  local k = tonumber(ARGV[i])
  local d = of[k]
  if not d then
    d = {at = {}, counts = {}}
    of[k] = d
  end
  d.at[#d.at + 1] = i
  d.counts[#d.counts + 1] = 'n:' .. ARGV[i + 1]
  work_fields[#work_fields + 1] = ARGV[i + 3]
end
-- Each dispatch's row once: whether it was begun (its seq) and its lanes' chunk counts.
local count_at = {}
for k = 1, (#KEYS - 2) / 2 do
  local d = of[k]
  local fields = {'seq'}
  if d then
    for _, f in ipairs(d.counts) do
      fields[#fields + 1] = f
    end
  end
  local row = redis.call('HMGET', KEYS[2 * k + 1], unpack(fields))
  if not row[1] then
    return {'not_found', k}
  end
  if d then
    for j, i in ipairs(d.at) do
      count_at[i] = row[j + 1]
    end
  end
end
if #work_fields == 0 then
  return {'ok'}
end
-- Check every chunk, in the order named: its lane's chunk count, its index, its work count.
local lefts = redis.call('HMGET', KEYS[1], unpack(work_fields))
local j = 0
for i = 2, #ARGV, 4 do
  j = j + 1
  local n = count_at[i] or '0'
  local count = tonumber(n)
  if not count then
    return {'corrupt', 'lane ' .. ARGV[i + 1] .. ' chunk count ' .. n .. ' is not a number'}
  end
  if tonumber(ARGV[i + 2]) >= count then
    return {'invalid', (i + 2) / 4}
  end
  local left = lefts[j]
  if left and not tonumber(left) then
    return {'corrupt', 'work count ' .. ARGV[i + 3] .. ' = ' .. left .. ' is not a number'}
  end
end
-- Mark: the chunks not yet complete (each once, however often it is named) go into the
-- dispatch's set in one SADD, and each work field counts down by how many of its chunks did.
local down = {}
local fields = {}
for k, d in pairs(of) do
  local done = KEYS[2 * k + 2]
  local members, seen = {}, {}
  for _, i in ipairs(d.at) do
    local member = ARGV[i + 1] .. ':' .. ARGV[i + 2]
    if not seen[member] then
      seen[member] = i
      members[#members + 1] = member
    end
  end
  -- One chunk (the common case: a lane's chunk of each of many dispatches) needs no SMISMEMBER.
  local known
  if #members == 1 then
    known = {1 - redis.call('SADD', done, members[1])}
  else
    known = redis.call('SMISMEMBER', done, unpack(members))
  end
  local new = {}
  for j, member in ipairs(members) do
    if known[j] == 0 then
      new[#new + 1] = member
      local field = ARGV[seen[member] + 3]
      if not down[field] then
        down[field] = 0
        fields[#fields + 1] = field
      end
      down[field] = down[field] + 1
    end
  end
  if #new > 0 and #members > 1 then
    redis.call('SADD', done, unpack(new))
  end
end
for _, field in ipairs(fields) do
  redis.call('HINCRBY', KEYS[1], field, -down[field])
end
return {'ok'}
