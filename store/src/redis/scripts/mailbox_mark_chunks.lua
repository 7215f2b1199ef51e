-- Marks chunks of dispatches of one shard complete (idempotent) and counts down, in the shard's
-- work hash, each lane's chunks not yet complete. Every chunk is checked before any is marked.
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
for k = 3, #KEYS, 2 do
  if redis.call('HEXISTS', KEYS[k], 'manifest') == 0 then
    return {'not_found', (k - 1) / 2}
  end
end
for i = 2, #ARGV, 4 do
  local row = KEYS[2 * tonumber(ARGV[i]) + 1]
  local n = redis.call('HGET', row, 'n:' .. ARGV[i + 1]) or '0'
  local count = tonumber(n)
  if not count then
    return {'corrupt', 'lane ' .. ARGV[i + 1] .. ' chunk count ' .. n .. ' is not a number'}
  end
  if tonumber(ARGV[i + 2]) >= count then
    return {'invalid', (i + 2) / 4}
  end
  local left = redis.call('HGET', KEYS[1], ARGV[i + 3])
  if left and not tonumber(left) then
    return {'corrupt', 'work count ' .. ARGV[i + 3] .. ' = ' .. left .. ' is not a number'}
  end
end
for i = 2, #ARGV, 4 do
  local done = KEYS[2 * tonumber(ARGV[i]) + 2]
  if redis.call('SADD', done, ARGV[i + 1] .. ':' .. ARGV[i + 2]) == 1 then
    redis.call('HINCRBY', KEYS[1], ARGV[i + 3], -1)
  end
end
return {'ok'}
