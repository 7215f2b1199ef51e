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


-- (The scripts that issue seqs, message_allocate_seq.lua and message_append.lua, whose KEYS[1..11]
-- are the same: see message_allocate_seq.lua.) The reply refusing a send of `sender` (its 16-byte
-- id; '' when the caller checked it) by the conversation's member cache, or nil.
local function membership_refusal(sender)
  if sender == '' then
    return nil
  end
  if redis.call('GET', KEYS[10]) ~= serving() then
    return {'members_unknown'}
  end
  if not redis.call('ZSCORE', KEYS[9], sender) then
    return {'not_member'}
  end
  return nil
end

-- (The same scripts.) The seq counter, the visible floor and the end of the lease valid here; or
-- nil, nil, nil and the reply that stops the issue: 'corrupt'; 'wait' (another caller holds the
-- revalidation token); 'revalidate' (the caller now holds `token` for `token_millis` ms, and the
-- claims are deleted: claims made under a lost lease may name seqs Redis no longer remembers, and
-- the revalidation restores those of durable records).
local function issuable(token, token_millis)
  local counter, has_counter, bad = number(KEYS[1], 'seq counter')
  if bad then return nil, nil, nil, bad end
  local floor, bad_floor = visible_floor()
  if bad_floor then return nil, nil, nil, bad_floor end
  local through, _, bad_lease = valid_lease(KEYS[2], has_counter)
  if bad_lease then return nil, nil, nil, bad_lease end
  if not through then
    if redis.call('EXISTS', KEYS[3]) == 1 then
      return nil, nil, nil, {'wait'}
    end
    redis.call('SET', KEYS[3], token, 'PX', token_millis)
    redis.call('DEL', KEYS[7], KEYS[8])
    return nil, nil, nil, {'revalidate', string.format('%d', counter), string.format('%d', floor), token, serving()}
  end
  return counter, floor, through
end
