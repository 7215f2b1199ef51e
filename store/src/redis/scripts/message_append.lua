-- Creates a send's commit in its conversation's slot with the seq it issues, and in mode
-- 'record' its record and index entry too, in one step (the group-commit layout, message.rs:
-- "Commit layouts"). The caller claimed the request key first (message_claim.lua).
--
-- The seq is issued as message_allocate_seq.lua issues it (the member cache, the lease, the
-- visible floor), and spliced as eight big-endian bytes into the head and record the caller
-- encoded with seq 0 (codec COMMIT_HEAD_SEQ_BYTES / RECORD_SEQ_BYTES). `created_at` is the
-- caller's proposal, never changed here: when the conversation's clock is ahead of it the script
-- writes nothing and answers the clock, and the caller proposes again.
--
-- KEYS[1..11]  as message_allocate_seq.lua: seq, lease, leasetoken, idx, lowbound, archived,
--              claims, claimtimes (deleted when a revalidation begins, as there), members,
--              memberscached, clock
-- KEYS[12] the commit          <ns>:{c:<tenant><conv>}:commit:<sender hex>:<client id>
-- KEYS[13] the records         <ns>:{c:<tenant><conv>}:rec
-- ARGV[1]  the canonical request bytes
-- ARGV[2]  the commit's head with seq 0 (RESERVED, or RECORDED in mode 'record')
-- ARGV[3]  the record with seq 0, or '' (mode 'reserve': the commit alone)
-- ARGV[4]  the proposed created_at, ms
-- ARGV[5]  a fresh token, in case a revalidation must begin
-- ARGV[6]  how long a token holds, ms
-- ARGV[7]  seqs left in the lease at or below which the caller should extend it early
-- ARGV[8]  the sender's 16-byte user id, who must be a member; '' when the caller checked it
-- ARGV[9]  the offset of the seq in the head;  ARGV[10] in the record
--
-- Replies: as message_allocate_seq.lua ('ok' with created_at = ARGV[4]; 'extend', 'revalidate',
-- 'wait', 'not_member', 'members_unknown', 'corrupt'), and
--   {'exists', req, head}  the commit exists (a replay, a racing attempt, another request):
--                          nothing written, whatever the lease
--   {'restamp', clock}     the conversation's clock is ahead of ARGV[4]: nothing written
local refused = membership_refusal(ARGV[8])
if refused then return refused end

local stored = redis.call('HMGET', KEYS[12], 'req', 'commit')
if stored[1] or stored[2] then
  if not stored[1] or not stored[2] then
    return {'corrupt', 'commit hash lacks its request or commit field'}
  end
  return {'exists', stored[1], stored[2]}
end

local counter, floor, through, stop = issuable(ARGV[5], ARGV[6])
if stop then return stop end

local stamp = tonumber(ARGV[4])
local clock = redis.call('GET', KEYS[11])
if clock then
  local at = tonumber(clock)
  if not at then
    return {'corrupt', 'the conversation clock is not a number'}
  end
  if at > stamp then
    return {'restamp', clock}
  end
end

if counter < floor then
  counter = floor
end
if counter + 1 > through then
  return {'extend', string.format('%d', through), string.format('%d', counter), serving()}
end
local n = counter + 1
local seq = string.format('%d', n)
if redis.call('HEXISTS', KEYS[13], seq) == 1 then
  return {'corrupt', 'seq ' .. seq .. ' is above the counter but holds a record'}
end

-- Eight big-endian bytes of `n` (below 2^53, so exact in a Lua number).
local function be64(v)
  local bytes = {}
  for i = 8, 1, -1 do
    bytes[i] = v % 256
    v = math.floor(v / 256)
  end
  return string.char(unpack(bytes))
end
local function splice(blob, at)
  return string.sub(blob, 1, at) .. be64(n) .. string.sub(blob, at + 9)
end

redis.call('SET', KEYS[1], seq)
if clock ~= ARGV[4] then
  redis.call('SET', KEYS[11], ARGV[4])
end
redis.call('HSET', KEYS[12], 'req', ARGV[1], 'commit', splice(ARGV[2], tonumber(ARGV[9])))
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[13], seq, splice(ARGV[3], tonumber(ARGV[10])))
  redis.call('ZADD', KEYS[4], seq, seq)
end
local renew = 0
if through - n <= tonumber(ARGV[7]) then
  renew = 1
end
return {'ok', seq, renew, string.format('%d', through), serving(), ARGV[4]}
