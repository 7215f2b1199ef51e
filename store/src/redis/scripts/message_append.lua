-- Creates sends' commits in their conversation's slot, each with the seq it issues, and in mode
-- 'record' their records and index entries too, in one step (the group-commit layout, message.rs:
-- "Commit layouts"). One call covers every send of the conversation in a tick (group.rs); each
-- send is answered as if it had been alone. The caller claimed each request key first
-- (message_claim.lua).
--
-- A seq is issued as message_allocate_seq.lua issues it (the member cache, the lease, the
-- visible floor), and spliced as eight big-endian bytes into the head and record the caller
-- encoded with seq 0 (codec COMMIT_HEAD_SEQ_BYTES / RECORD_SEQ_BYTES). A send's `created_at` is
-- the caller's proposal, never changed here: when the conversation's clock is ahead of it
-- nothing is written for that send and its answer is the clock, and the caller proposes again.
--
-- KEYS[1..11]  as message_allocate_seq.lua: seq, lease, leasetoken, idx, lowbound, archived,
--              claims, claimtimes (deleted when a revalidation begins, as there), members,
--              memberscached, clock
-- KEYS[12]     the records       <ns>:{c:<tenant><conv>}:rec
-- KEYS[12+i]   send i's commit   <ns>:{c:<tenant><conv>}:commit:<sender hex>:<client id>
-- ARGV[1]  a fresh token, in case a revalidation must begin
-- ARGV[2]  how long a token holds, ms
-- ARGV[3]  seqs left in the lease at or below which the caller should extend it early
-- ARGV[4]  the offset of the seq in the head;  ARGV[5] in the record
-- ARGV[5+5(i-1)+1..5]  send i: the canonical request bytes; the commit's head with seq 0
--          (RESERVED, or RECORDED with a record); the record with seq 0 or '' (the commit
--          alone); the proposed created_at, ms; the sender's 16-byte user id, who must be a
--          member, or '' when the caller checked it
--
-- Replies: one per send, in order, each as message_allocate_seq.lua answers ('ok' with
-- created_at = the send's proposal; 'extend', 'revalidate', 'wait', 'not_member',
-- 'members_unknown', 'corrupt'), or
--   {'exists', req, head}  the commit exists (a replay, a racing attempt, another request):
--                          nothing written for it, whatever the lease
--   {'restamp', clock}     the conversation's clock is ahead of its proposal: nothing written
--   {'later'}              an earlier send of this call stopped the issue (it was answered what
--                          the lease needs): nothing written for it; send it again
local sends = #KEYS - 12
local replies = {}
local head_at, record_at = tonumber(ARGV[4]), tonumber(ARGV[5])

-- Eight big-endian bytes of `v` (below 2^53, so exact in a Lua number).
local function be64(v)
  local bytes = {}
  for i = 8, 1, -1 do
    bytes[i] = v % 256
    v = math.floor(v / 256)
  end
  return string.char(unpack(bytes))
end
local function splice(blob, at, n)
  return string.sub(blob, 1, at) .. be64(n) .. string.sub(blob, at + 9)
end

-- Read once, at the first send that needs a seq; then kept here as seqs are issued.
local counter, floor, through, stop
local clock, clock_read = nil, false
local issued = nil
for i = 1, sends do
  local a = 5 + 5 * (i - 1)
  local commit = KEYS[12 + i]
  local stamp_text = ARGV[a + 4]
  local reply = membership_refusal(ARGV[a + 5])
  if not reply then
    local stored = redis.call('HMGET', commit, 'req', 'commit')
    if stored[1] or stored[2] then
      if not stored[1] or not stored[2] then
        reply = {'corrupt', 'commit hash lacks its request or commit field'}
      else
        reply = {'exists', stored[1], stored[2]}
      end
    end
  end
  if not reply and stop then
    reply = {'later'}
  end
  if not reply and not counter then
    counter, floor, through, stop = issuable(ARGV[1], ARGV[2])
    if stop then
      reply = stop
    elseif counter < floor then
      counter = floor
    end
  end
  if not reply and not clock_read then
    clock_read = true
    local raw = redis.call('GET', KEYS[11])
    if raw then
      clock = tonumber(raw)
      if not clock then
        reply = {'corrupt', 'the conversation clock is not a number'}
        stop = reply
      end
    end
  end
  local stamp = tonumber(stamp_text)
  if not reply and clock and clock > stamp then
    reply = {'restamp', string.format('%d', clock)}
  end
  if not reply and counter + 1 > through then
    reply = {'extend', string.format('%d', through), string.format('%d', counter), serving()}
    stop = reply
  end
  if not reply then
    local n = counter + 1
    local seq = string.format('%d', n)
    if redis.call('HEXISTS', KEYS[12], seq) == 1 then
      reply = {'corrupt', 'seq ' .. seq .. ' is above the counter but holds a record'}
      stop = reply
    else
      counter, clock, issued = n, stamp, true
      redis.call('HSET', commit, 'req', ARGV[a + 1], 'commit', splice(ARGV[a + 2], head_at, n))
      if ARGV[a + 3] ~= '' then
        redis.call('HSET', KEYS[12], seq, splice(ARGV[a + 3], record_at, n))
        redis.call('ZADD', KEYS[4], seq, seq)
      end
      local renew = 0
      if through - n <= tonumber(ARGV[3]) then
        renew = 1
      end
      reply = {'ok', seq, renew, string.format('%d', through), serving(), stamp_text}
    end
  end
  replies[i] = reply
end
if issued then
  redis.call('SET', KEYS[1], string.format('%d', counter))
  redis.call('SET', KEYS[11], string.format('%d', clock))
end
return replies
