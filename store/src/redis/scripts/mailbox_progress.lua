-- Reads what is known of one dispatch, atomically.
--
-- KEYS[1] dispatch HASH, KEYS[2] completed-chunks SET
-- Reply: {} when never begun (or collected), else {manifest, canonical, seq, max, chunk...}
local r = redis.call('HMGET', KEYS[1], 'manifest', 'canonical', 'seq', 'max')
if not r[1] then
  return {}
end
local out = {r[1], r[2], r[3], r[4]}
for _, c in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  out[#out + 1] = c
end
return out
