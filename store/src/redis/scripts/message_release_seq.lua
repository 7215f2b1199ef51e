-- Gives back a seq that `reserve` allocated speculatively and then did not use (the key turned
-- out to be taken: a replay or a conflict), but only while it is still the newest seq issued:
-- if anyone was issued a later seq meanwhile, it stays a hole. A released seq was never written
-- anywhere (no commit, record or publication carries it), so issuing it again is the same as
-- never having issued it; a seq that anything may carry is never given back.
--
-- KEYS[1]  the seq counter   <ns>:{c:<tenant><conv>}:seq
-- ARGV[1]  the seq to give back, decimal
--
-- Replies: {'released'} | {'hole'} (a later seq was issued, or the counter changed otherwise)
local seq = tonumber(ARGV[1])
if seq and seq >= 1 and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], string.format('%d', seq - 1))
  return {'released'}
end
return {'hole'}
