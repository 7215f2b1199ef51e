-- Writes one history record and its index entry (same-value overwrite: a retried step writes
-- the same bytes again).
--
-- KEYS[1]  the history index   <ns>:{c:<tenant><conversation>}:idx  (ZSET, member = score = seq)
-- KEYS[2]  the records         <ns>:{c:<tenant><conversation>}:rec  (HASH seq -> record blob)
-- KEYS[3]  the seq counter     <ns>:{c:<tenant><conversation>}:seq
-- KEYS[4]  the hot-tier lower bound <ns>:{c:<tenant><conversation>}:lowbound (absent = 0)
-- KEYS[5]  the expiry drain's tombstones <ns>:{c:<tenant><conversation>}:gcdone
-- KEYS[6]  the seq lease       <ns>:{c:<tenant><conversation>}:lease (see lease_prelude.lua)
-- ARGV[1]  the seq, decimal
-- ARGV[2]  the canonical record blob
-- ARGV[3]  'read': the caller just read the commit and found it RESERVED with this intent;
--          'known': the caller relies on what it wrote itself moments ago (RedisMessageStore's
--          in-flight knowledge), which may be stale. Then a record that does not exist yet is
--          written only if nothing says it existed and was removed, or was never reserved in
--          what Redis holds now: the seq was issued under the lease valid now (above its start,
--          at most the counter), is above the hot-tier lower bound (not trimmed) and not
--          tombstoned by the expiry drain. A stale belief can so never resurrect a trimmed or
--          expired record, nor write one whose commit Redis lost.
--
-- Replies: {'ok'} | {'corrupt', reason} | {'conflict', reason} (the seq already holds another
-- record: two writers were handed one seq, and the second must never overwrite the first) |
-- {'stale', reason} ('known' only: read the commit and call again with 'read')
-- (`number` and `valid_lease` come from lease_prelude.lua.)
local seq = ARGV[1]
if not string.match(seq, '^[1-9][0-9]*$') then
  return {'corrupt', 'seq ' .. seq .. ' is not a positive decimal'}
end
local existing = redis.call('HGET', KEYS[2], seq)
if existing and existing ~= ARGV[2] then
  return {'conflict', 'seq ' .. seq .. ' already holds another record; refusing to overwrite it'}
end
if not existing and ARGV[3] == 'known' then
  local n = tonumber(seq)
  local counter, has_counter, bad = number(KEYS[3], 'seq counter')
  if bad then return bad end
  if counter < n then
    return {'stale', 'the seq counter has not issued seq ' .. seq}
  end
  local _, start, bad_lease = valid_lease(KEYS[6], has_counter)
  if bad_lease then return bad_lease end
  if not start or n <= start then
    return {'stale', 'seq ' .. seq .. ' was not issued under the lease valid now'}
  end
  local low = tonumber(redis.call('GET', KEYS[4]) or '0')
  if not low or n <= low then
    return {'stale', 'seq ' .. seq .. ' is at or below the hot-tier lower bound'}
  end
  if redis.call('SISMEMBER', KEYS[5], seq) == 1 then
    return {'stale', 'the expiry drain deleted seq ' .. seq}
  end
end
redis.call('HSET', KEYS[2], seq, ARGV[2])
redis.call('ZADD', KEYS[1], seq, seq)
return {'ok'}
