-- Installs, extends or gives up a conversation's seq lease (DESIGN invariant 7; "Seq leases" in
-- lease.rs). The durable high-water mark was moved first, naming this copy of the data (ARGV[3]) as
-- its holder.
--
-- KEYS[1]  the seq counter           <ns>:{c:<tenant><conv>}:seq
-- KEYS[2]  the lease                 <ns>:{c:<tenant><conv>}:lease       '<serving>:<through>:<start>'
-- KEYS[3]  the revalidation token    <ns>:{c:<tenant><conv>}:leasetoken
-- KEYS[4]  the history index         <ns>:{c:<tenant><conv>}:idx
-- KEYS[5]  the hot-tier lower bound  <ns>:{c:<tenant><conv>}:lowbound
-- KEYS[6]  the archived watermark    <ns>:{c:<tenant><conv>}:archived
-- ARGV[1]  the mode:
--   'revalidate' ARGV[2] the new end (the mark's), ARGV[3] the holder the mark names,
--                ARGV[4] the token the allocation handed out, ARGV[5] the mark the caller moved
--                it from (read after the token was taken).
--                Succeeds only while the token is still the caller's: then no seq was issued in
--                the conversation since the token was taken (allocation refuses without a valid
--                lease), and every seq issued anywhere before is at or below the mark moved
--                from. So the counter restarts there (or above what the conversation holds) and
--                nothing is issued twice.
--   'extend'     ARGV[2] the new end, ARGV[3] the holder. Needs the lease to still be valid;
--                only moves its end up.
--   'abandon'    ARGV[2] the lease's end, ARGV[3] the holder: another process holds the mark
--                now; deletes the lease if it is still this one, so the next allocation
--                revalidates above the mark.
--   'release'    ARGV[2] a token: deletes it if it is still that one (a revalidation failed).
--   'keep'       ARGV[2] a token, ARGV[3] ms: renews its TTL if it is still that one (a
--                revalidation under way keeps its token; a crashed one's lapses soon).
--
-- Replies: {'ok', counter, through} | {'retry', reason} (allocate again) | {'corrupt', reason}
-- (`run`, `number`, `valid_lease`, `lease_value` and `visible_floor` come from lease_prelude.lua.)
local mode = ARGV[1]
if mode == 'release' then
  if redis.call('GET', KEYS[3]) == ARGV[2] then
    redis.call('DEL', KEYS[3])
  end
  return {'ok', '0', '0'}
end
if mode == 'keep' then
  if redis.call('GET', KEYS[3]) == ARGV[2] then
    redis.call('PEXPIRE', KEYS[3], ARGV[3])
    return {'ok', '1', '0'}
  end
  return {'ok', '0', '0'}
end
if ARGV[3] ~= serving() then
  return {'retry', 'the mark names another copy of the data than the one now served'}
end
local target = tonumber(ARGV[2])
local counter, has_counter, bad = number(KEYS[1], 'seq counter')
if bad then return bad end
if mode == 'revalidate' then
  if redis.call('GET', KEYS[3]) ~= ARGV[4] then
    return {'retry', 'the revalidation token expired or was taken over'}
  end
  local floor, bad_floor = visible_floor()
  if bad_floor then return bad_floor end
  local start = math.max(counter, tonumber(ARGV[5]), floor)
  if start >= target then
    return {'retry', 'the lease end is not above the counter'}
  end
  redis.call('SET', KEYS[1], string.format('%d', start))
  redis.call('SET', KEYS[2], lease_value(target, start))
  redis.call('DEL', KEYS[3])
  return {'ok', string.format('%d', start), string.format('%d', target)}
end
local through, start, bad_lease = valid_lease(KEYS[2], has_counter)
if bad_lease then return bad_lease end
if not through then
  return {'retry', 'the lease is no longer valid'}
end
if mode == 'abandon' then
  if through == target then
    redis.call('DEL', KEYS[2])
  end
  return {'ok', string.format('%d', counter), string.format('%d', through)}
end
if target > through then
  through = target
  redis.call('SET', KEYS[2], lease_value(through, start))
end
return {'ok', string.format('%d', counter), string.format('%d', through)}
