-- A shard's incarnation in this Redis: '<serving>:<nonce>', made anew whenever the marker is gone
-- (a flush, lost keys) or names another copy of the data (a restart, a failover, a restore), so it
-- changes whenever Redis may have lost or rolled back the shard's state.
--
-- KEYS[1]  the marker   <ns>:{d:<shard>}:incarnation
-- ARGV[1]  a fresh nonce, used if the marker must be made anew
--
-- Reply: the incarnation in force
local run = serving()
local marker = redis.call('GET', KEYS[1])
if marker and string.sub(marker, 1, #run + 1) == run .. ':' then
  return marker
end
marker = run .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], marker)
return marker
