-- Raises a counter-like key to at least ARGV[1] (never lowers it): moving an archived watermark
-- forward.
--
-- KEYS[1]  the key (a decimal integer, absent = 0)
-- ARGV[1]  the value to reach
--
-- Replies: {'ok', value in force afterwards} | {'corrupt', reason}
local raw = redis.call('GET', KEYS[1]) or '0'
local current = tonumber(raw)
if not current then
  return {'corrupt', KEYS[1] .. ' holds ' .. raw .. ', not a number'}
end
local wanted = tonumber(ARGV[1])
if wanted > current then
  redis.call('SET', KEYS[1], ARGV[1])
  return {'ok', ARGV[1]}
end
return {'ok', tostring(current)}
