-- Extends a writer id's lease while it is still this holder's (see writer_id.rs).
--
-- KEYS[1]  the id's key   <ns>:{writerids}:<n>   the holder's token, with a TTL
-- ARGV[1]  the holder's token
-- ARGV[2]  the lease's life, ms
--
-- Replies 1 (extended) or 0 (lost: the key is gone or holds another token).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
