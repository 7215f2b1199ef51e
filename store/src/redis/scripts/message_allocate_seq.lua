-- Issues the next seq of a conversation, unless Redis may have lost or rolled back the counter.
--
-- KEYS[1]  the seq counter          <ns>:{c:<tenant><conv>}:seq
-- KEYS[2]  the seed marker of the counter's slot (see seeding.rs and seed_marker.lua)
-- KEYS[3]  the history index        <ns>:{c:<tenant><conv>}:idx
-- KEYS[4]  the hot-tier lower bound <ns>:{c:<tenant><conv>}:lowbound
-- KEYS[5]  the archived watermark   <ns>:{c:<tenant><conv>}:archived
--
-- Replies:
--   {'ok', seq}             the issued seq
--   {'unseeded', reason}    the slot's marker is missing or names another Redis process
--                           (restart, failover, restore: counters may have rolled back), or the
--                           counter is gone while the conversation still has history
--   {'corrupt', reason}     a stored number is not a number
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local marker = redis.call('GET', KEYS[2])
if not marker or string.sub(marker, 1, #run + 1) ~= run .. ':' then
  return {'unseeded', 'the seed marker of this slot is missing or names another Redis process (restart, failover or lost state since seeding)'}
end
local function number(key, what)
  local raw = redis.call('GET', key)
  if not raw then
    return 0, false
  end
  local n = tonumber(raw)
  if not n then
    return nil, true, {'corrupt', what .. ' ' .. raw .. ' is not a number'}
  end
  return n, true
end
local counter, has_counter, bad = number(KEYS[1], 'seq counter')
if bad then return bad end
local low, has_low, bad_low = number(KEYS[4], 'hot-tier lower bound')
if bad_low then return bad_low end
local archived, _, bad_archived = number(KEYS[5], 'archived watermark')
if bad_archived then return bad_archived end
local top = redis.call('ZREVRANGE', KEYS[3], 0, 0, 'WITHSCORES')
local top_seq = 0
if top[2] then
  top_seq = tonumber(top[2])
end
if not has_counter and (top_seq > 0 or has_low) then
  return {'unseeded', 'the seq counter is gone while the conversation still has history'}
end
-- Never issue at or below what the conversation visibly holds (a counter rolled back while its
-- history survived, or a re-seed that raced an in-flight send).
local floor = math.max(top_seq, low, archived)
if counter < floor then
  redis.call('SET', KEYS[1], string.format('%d', floor))
end
return {'ok', redis.call('INCR', KEYS[1])}
