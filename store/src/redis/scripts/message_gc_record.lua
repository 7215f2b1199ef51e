-- Deletes one expired history record and its index entry (the conversation-slot half of the
-- expiry drain; the caller then removes the expiry index member). The tombstone stays for
-- TOMBSTONE_MS, so a member registered again later (a commit step retried after a crash) is
-- recognised as `already` instead of failing the drain as corrupt.
--
-- KEYS[1]  the history index   (ZSET, member = score = seq)
-- KEYS[2]  the records         (HASH seq -> record blob)
-- KEYS[3]  the hot-tier lower bound (string seq; absent = 0): seqs at or below it were trimmed
-- KEYS[4]  the drain tombstones (SET of seqs deleted here whose expiry member may still exist)
-- ARGV[1]  the seq, decimal
-- ARGV[2]  how long tombstones live, ms
--
-- Replies:
--   {'removed'}           the record and/or its index entry were deleted now
--   {'already'}           a previous drain deleted them and crashed before removing the member
--   {'orphan'}            both were missing at or below the lower bound (left by a trim)
--   {'corrupt', reason}   both missing above the lower bound: fail closed
local seq = ARGV[1]
if not string.match(seq, '^[1-9][0-9]*$') then
  return {'corrupt', 'expiry index seq ' .. seq .. ' is not a positive decimal'}
end
local had_record = redis.call('HDEL', KEYS[2], seq)
local had_index = redis.call('ZREM', KEYS[1], seq)
if had_record == 1 or had_index == 1 then
  redis.call('SADD', KEYS[4], seq)
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  return {'removed'}
end
if redis.call('SISMEMBER', KEYS[4], seq) == 1 then
  return {'already'}
end
local low = redis.call('GET', KEYS[3])
local bound = 0
if low then
  bound = tonumber(low)
  if not bound then
    return {'corrupt', 'hot-tier lower bound ' .. low .. ' is not a number'}
  end
end
if tonumber(seq) <= bound then
  return {'orphan'}
end
return {'corrupt', 'expiry index names seq ' .. seq .. ' but record and index are missing'}
