-- Shared by the seq lease scripts (message_allocate_seq.lua, message_lease_install.lua): put in
-- front of each when it is loaded (scripts.rs). Both take the conversation's counter, lease,
-- token, history index, hot-tier lower bound and archived watermark as KEYS[1..6].

-- The Redis process now serving: a lease is valid only in the process it was installed in.
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')

-- The number `key` holds (0 when absent), whether the key exists, and a 'corrupt' reply when it
-- holds something else.
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

-- The highest seq the conversation visibly holds (its history index's top, the hot-tier lower
-- bound, the archived watermark), or nil and a 'corrupt' reply. No seq is issued at or below it.
local function visible_floor()
  local low, _, bad_low = number(KEYS[5], 'hot-tier lower bound')
  if bad_low then return nil, bad_low end
  local archived, _, bad_archived = number(KEYS[6], 'archived watermark')
  if bad_archived then return nil, bad_archived end
  local top = redis.call('ZREVRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  return math.max(tonumber(top[2] or '0'), low, archived)
end

