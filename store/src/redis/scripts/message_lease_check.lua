-- Whether a conversation's hot tier is known to hold everything Redis was given since its
-- lease was installed: the lease names the Redis process now serving and the counter exists
-- (after a restart, failover, restore or flush it does not, until the next revalidation).
--
-- KEYS[1]  the seq counter  <ns>:{c:<tenant><conv>}:seq
-- KEYS[2]  the lease        <ns>:{c:<tenant><conv>}:lease  '<run_id>:<through>'
--
-- Reply: 1 (valid) | 0
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local lease = redis.call('GET', KEYS[2])
if not lease or redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if string.sub(lease, 1, #run + 1) == run .. ':' then
  return 1
end
return 0
