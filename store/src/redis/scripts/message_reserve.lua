-- Creates a RESERVED commit if its key is free (SET-if-absent on the commit slot).
--
-- KEYS[1]  the commit hash   <ns>:{k:<tenant><sender>}:commit:<client id>
-- ARGV[1]  the canonical request bytes (the stable request identity)
-- ARGV[2]  the canonical RESERVED commit blob
--
-- Replies:
--   {'ok'}                   the commit was created
--   {'exists', <commit>}     another reserver got there first with byte-identical request bytes:
--                            its commit is the answer (the caller's seq stays a hole)
--   {'conflict', reason}     the key holds a different request
--   {'corrupt', reason}      the hash is half-written
local req = redis.call('HGET', KEYS[1], 'req')
local commit = redis.call('HGET', KEYS[1], 'commit')
if req or commit then
  if not req or not commit then
    return {'corrupt', 'commit hash lacks its request or commit field'}
  end
  if req ~= ARGV[1] then
    return {'conflict', 'the same key was reserved for different content'}
  end
  return {'exists', commit}
end
redis.call('HSET', KEYS[1], 'req', ARGV[1], 'commit', ARGV[2])
return {'ok'}
