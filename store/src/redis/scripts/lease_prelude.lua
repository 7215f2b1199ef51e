-- Shared by the scripts that read a conversation's seq lease: put in front of each when it is
-- loaded (scripts.rs), after serving_prelude.lua. A lease is '<serving>:<through>:<start>': the
-- copy of the data it was installed in (`serving()`), the highest seq it may issue, and the
-- counter it was installed at (every seq above `start` and at most the counter was issued
-- under it).

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

-- The lease at `key` when it is valid here (it names the copy of the data now served, and the
-- counter exists: `has_counter`): its end and its start. Nothing when it is missing or not
-- valid here; nil, nil and a 'corrupt' reply when it is malformed.
local function valid_lease(key, has_counter)
  local raw = redis.call('GET', key)
  if not raw then
    return nil
  end
  local owner, through, start = string.match(raw, '^(%x+):(%d+):(%d+)$')
  if not owner then
    if string.match(raw, '^%x+:%d+$') then
      -- An earlier release's lease (no start): not valid; the next send revalidates.
      return nil
    end
    return nil, nil, {'corrupt', 'lease ' .. raw .. ' is malformed'}
  end
  if owner ~= serving() or not has_counter then
    return nil
  end
  return tonumber(through), tonumber(start)
end

-- The lease value for this process.
local function lease_value(through, start)
  return serving() .. ':' .. string.format('%d', through) .. ':' .. string.format('%d', start)
end

-- (Allocation and installation, whose KEYS[4..6] are the history index, the hot-tier lower
-- bound and the archived watermark.) The highest seq the conversation visibly holds, or nil and
-- a 'corrupt' reply. No seq is issued at or below it.
local function visible_floor()
  local low, _, bad_low = number(KEYS[5], 'hot-tier lower bound')
  if bad_low then return nil, bad_low end
  local archived, _, bad_archived = number(KEYS[6], 'archived watermark')
  if bad_archived then return nil, bad_archived end
  local top = redis.call('ZREVRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  return math.max(tonumber(top[2] or '0'), low, archived)
end

