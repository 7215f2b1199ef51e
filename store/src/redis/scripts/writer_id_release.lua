-- Gives a writer id back if it is still this holder's (see writer_id.rs).
--
-- KEYS[1]  the id's key   <ns>:{writerids}:<n>
-- ARGV[1]  the holder's token
--
-- Replies 1 (released) or 0 (not this holder's: left alone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
