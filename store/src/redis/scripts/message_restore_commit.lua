-- Restores one COMMITTED commit from qim.messages.v1 (rebuild after Redis lost state), so a
-- client's retry of an acknowledged send gets its first answer again. Writes only a free key:
-- a commit already there, in whatever state, is left alone.
--
-- KEYS[1]  the commit hash   <ns>:{k:<tenant><sender>}:commit:<client id>
-- ARGV[1]  the canonical request bytes
-- ARGV[2]  the COMMITTED commit's head (codec::encode_commit_head)
-- ARGV[3]  milliseconds of Redis TTL for the hash (the safety net committed commits carry)
--
-- Replies: {'restored'} | {'present'}
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'present'}
end
redis.call('HSET', KEYS[1], 'req', ARGV[1], 'commit', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'restored'}
