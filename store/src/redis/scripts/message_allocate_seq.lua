-- Issues the next seq of a conversation within its lease of the durable high-water mark, or
-- says what the caller must do first (DESIGN invariant 7; "Seq leases" in message.rs).
--
-- A request key is claimed with the seq it was issued and its `created_at`: an attempt of the
-- same key (a retry of a send still in flight, a send that crashed before its commit was
-- written) gets both again instead of a new seq, so retries leave no holes.
--
-- The conversation's clock (KEYS[11]) is the highest `created_at` issued in it: a new seq's
-- `created_at` is the caller's proposal or the clock, whichever is later, so within a
-- conversation `created_at` never decreases as the seq grows, whatever the skew between the
-- writers' clocks (their hybrid logical clocks observe the answer; see reserve.rs).
--
-- KEYS[1]  the seq counter           <ns>:{c:<tenant><conv>}:seq
-- KEYS[2]  the lease                 <ns>:{c:<tenant><conv>}:lease       '<serving>:<through>:<start>'
-- KEYS[3]  the revalidation token    <ns>:{c:<tenant><conv>}:leasetoken
-- KEYS[4]  the history index         <ns>:{c:<tenant><conv>}:idx
-- KEYS[5]  the hot-tier lower bound  <ns>:{c:<tenant><conv>}:lowbound
-- KEYS[6]  the archived watermark    <ns>:{c:<tenant><conv>}:archived
-- KEYS[7]  the claims                <ns>:{c:<tenant><conv>}:claims      HASH claim -> '<seq>:<claimed_at ms>'
-- KEYS[8]  the claims by time        <ns>:{c:<tenant><conv>}:claimtimes  ZSET score = claimed_at ms
-- KEYS[9]  the cached members        <ns>:{c:<tenant><conv>}:members     (membership_cached.lua)
-- KEYS[10] the member cache's marker <ns>:{c:<tenant><conv>}:memberscached
-- KEYS[11] the conversation's clock <ns>:{c:<tenant><conv>}:clock       highest created_at issued, ms
-- ARGV[1]  the claim: '<sender hex>:<client message id>'
-- ARGV[2]  now, ms (the store's hybrid clock): the proposed created_at
-- ARGV[3]  how long a claim holds, ms
-- ARGV[4]  a fresh token, in case a revalidation must begin
-- ARGV[5]  how long a token holds, ms (Redis's clock: it only bounds a crashed holder)
-- ARGV[6]  seqs left in the lease at or below which the caller should extend it early
-- ARGV[7]  the sender's 16-byte user id, who must be a member; '' when the caller checked it
--
-- Replies:
--   {'ok', seq, renew, through, run, created_at}
--                               the seq (a new one, or the claim's again), the lease's end and
--                               the copy of the data it is valid in (`serving()`); renew 1:
--                               extend it soon; the send's created_at (the claim's, or
--                               max(ARGV[2], clock))
--   {'extend', through, counter, run}
--                               the lease is used up: move the durable mark, then extend it
--   {'revalidate', counter, floor, token, run}
--                               the lease is missing or names another copy of the data (restart,
--                               failover, restore, flush) or the counter is gone: counters may
--                               have rolled back. The caller now holds `token` and must restore,
--                               read the durable mark and install a lease above it.
--   {'wait'}                    another caller holds the revalidation token
--   {'not_member'}              the member cache is valid and does not hold the sender
--   {'members_unknown'}         the member cache is not valid in this copy of the data: the
--                               caller asks the durable membership (which fills the cache)
--   {'corrupt', reason}         a stored value is malformed
-- (`run`, `membership_refusal` and `issuable` come from lease_prelude.lua.)
-- The sender's membership first, from the cache the history reads use, so a refused send
-- issues nothing.
local refused = membership_refusal(ARGV[7])
if refused then return refused end

local counter, floor, through, stop = issuable(ARGV[4], ARGV[5])
if stop then return stop end

local now = tonumber(ARGV[2])
local life = tonumber(ARGV[3])
local expired = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', string.format('%d', now - life), 'LIMIT', 0, 8)
if #expired > 0 then
  redis.call('HDEL', KEYS[7], unpack(expired))
  redis.call('ZREM', KEYS[8], unpack(expired))
end
local claim = redis.call('HGET', KEYS[7], ARGV[1])
if claim then
  local seq, at = string.match(claim, '^(%d+):(%-?%d+)$')
  if not seq then
    return {'corrupt', 'claim ' .. claim .. ' is malformed'}
  end
  if tonumber(at) + life > now then
    return {'ok', seq, 0, string.format('%d', through), serving(), at}
  end
end
-- Never issue at or below what the conversation visibly holds.
if counter < floor then
  counter = floor
end
if counter + 1 > through then
  return {'extend', string.format('%d', through), string.format('%d', counter), serving()}
end
local clock = redis.call('GET', KEYS[11])
local stamp = now
if clock then
  clock = tonumber(clock)
  if not clock then
    return {'corrupt', 'the conversation clock is not a number'}
  end
  if clock > stamp then
    stamp = clock
  end
end
local created_at = string.format('%d', stamp)
local seq = string.format('%d', counter + 1)
redis.call('SET', KEYS[1], seq)
if stamp ~= clock then
  redis.call('SET', KEYS[11], created_at)
end
redis.call('HSET', KEYS[7], ARGV[1], seq .. ':' .. created_at)
redis.call('ZADD', KEYS[8], created_at, ARGV[1])
-- An idle conversation's claims go with Redis's clock too (a safety net; validity is ARGV's).
redis.call('PEXPIRE', KEYS[7], string.format('%d', 2 * life))
redis.call('PEXPIRE', KEYS[8], string.format('%d', 2 * life))
local renew = 0
if through - (counter + 1) <= tonumber(ARGV[6]) then
  renew = 1
end
return {'ok', seq, renew, string.format('%d', through), serving(), created_at}
