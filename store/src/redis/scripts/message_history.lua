-- Reads up to ARGV[3] history index entries from an exclusive anchor in one direction, with
-- their record blobs, in one consistent snapshot. The caller decodes and checks every record.
--
-- KEYS[1]  the history index   (ZSET, member = score = seq)
-- KEYS[2]  the records         (HASH seq -> record blob)
-- ARGV[1]  'older' (descending) or 'newer' (ascending)
-- ARGV[2]  exclusive anchor seq, or '' to start at the newest/oldest
-- ARGV[3]  how many index entries at most
--
-- Reply: a flat array seq1, blob1, seq2, blob2, ... where a missing record is nil.
local count = tonumber(ARGV[3])
local seqs
if ARGV[1] == 'newer' then
  local min = '-inf'
  if ARGV[2] ~= '' then min = '(' .. ARGV[2] end
  seqs = redis.call('ZRANGEBYSCORE', KEYS[1], min, '+inf', 'LIMIT', 0, count)
else
  local max = '+inf'
  if ARGV[2] ~= '' then max = '(' .. ARGV[2] end
  seqs = redis.call('ZREVRANGEBYSCORE', KEYS[1], max, '-inf', 'LIMIT', 0, count)
end
local out = {}
for i, seq in ipairs(seqs) do
  out[2 * i - 1] = seq
  -- false (a missing field) becomes a nil reply; the caller fails closed on it
  out[2 * i] = redis.call('HGET', KEYS[2], seq)
end
return out
