-- Creates a RESERVED commit if its key is free (SET-if-absent on the commit slot). The caller
-- compares request bytes: it knows what it asked for, and needs the stored commit either way.
--
-- KEYS[1]  the commit hash   <ns>:{k:<tenant><sender>}:commit:<client id>
-- KEYS[2]  the key's claim   <ns>:{k:<tenant><sender>}:claim:<client id> (the group-commit
--          layout's, message_claim.lua): when it exists without a commit here, the key belongs
--          to a commit in a conversation's slot
-- ARGV[1]  the canonical request bytes (the stable request identity)
-- ARGV[2]  the RESERVED commit's head (codec::encode_commit_head: all but the request)
--
-- Replies:
--   {'ok'}                        the commit was created
--   {'exists', <req>, <commit>}   the key was already taken (by a replay's first reservation,
--                                 a racing reserver, or a different request): nothing written
--   {'moved'}                     the key is claimed by the group-commit layout: nothing written
--   {'corrupt', reason}           the hash is half-written
local req = redis.call('HGET', KEYS[1], 'req')
local commit = redis.call('HGET', KEYS[1], 'commit')
if req or commit then
  if not req or not commit then
    return {'corrupt', 'commit hash lacks its request or commit field'}
  end
  return {'exists', req, commit}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {'moved'}
end
redis.call('HSET', KEYS[1], 'req', ARGV[1], 'commit', ARGV[2])
return {'ok'}
