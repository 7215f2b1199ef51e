-- Installs a conversation's seq lease, once the durable high-water mark was raised to its end
-- (DESIGN invariant 7; "Seq leases" in message.rs).
--
-- KEYS[1]  the seq counter           <ns>:{c:<tenant><conv>}:seq
-- KEYS[2]  the lease                 <ns>:{c:<tenant><conv>}:lease       '<run_id>:<through>'
-- KEYS[3]  the revalidation token    <ns>:{c:<tenant><conv>}:leasetoken
-- KEYS[4]  the history index         <ns>:{c:<tenant><conv>}:idx
-- KEYS[5]  the hot-tier lower bound  <ns>:{c:<tenant><conv>}:lowbound
-- KEYS[6]  the archived watermark    <ns>:{c:<tenant><conv>}:archived
-- ARGV[1]  'revalidate' or 'extend'
-- ARGV[2]  the new end of the lease: the durable mark is already at least this
-- ARGV[3]  (revalidate) the token the allocation handed out
-- ARGV[4]  (revalidate) the durable mark, read after the token was taken
--
-- 'revalidate' succeeds only while the token is still the caller's: then no seq was issued in
-- the conversation since the token was taken (allocation refuses without a valid lease), and
-- every seq issued before is at or below the mark read after it. So the counter restarts at
-- the mark (or above what the conversation holds) and nothing is issued twice. 'extend' needs
-- the lease to still be valid (the same Redis process, the counter present); it only moves
-- the lease's end up.
--
-- Replies: {'ok', counter, through} | {'retry', reason} (allocate again) | {'corrupt', reason}
-- (`run`, `number` and `visible_floor` come from lease_prelude.lua.)
local target = tonumber(ARGV[2])
local counter, has_counter, bad = number(KEYS[1], 'seq counter')
if bad then return bad end
if ARGV[1] == 'revalidate' then
  if redis.call('GET', KEYS[3]) ~= ARGV[3] then
    return {'retry', 'the revalidation token expired or was taken over'}
  end
  local floor, bad_floor = visible_floor()
  if bad_floor then return bad_floor end
  local start = math.max(counter, tonumber(ARGV[4]), floor)
  if start >= target then
    return {'retry', 'the lease end is not above the counter'}
  end
  redis.call('SET', KEYS[1], string.format('%d', start))
  redis.call('SET', KEYS[2], run .. ':' .. string.format('%d', target))
  redis.call('DEL', KEYS[3])
  return {'ok', string.format('%d', start), string.format('%d', target)}
end
local lease = redis.call('GET', KEYS[2])
local owner, value = nil, nil
if lease then
  owner, value = string.match(lease, '^(%x+):(%d+)$')
  if not owner then
    return {'corrupt', 'lease ' .. lease .. ' is malformed'}
  end
end
if owner ~= run or not has_counter then
  return {'retry', 'the lease is no longer valid'}
end
local through = tonumber(value)
if target > through then
  through = target
  redis.call('SET', KEYS[2], run .. ':' .. string.format('%d', target))
end
return {'ok', string.format('%d', counter), string.format('%d', through)}
