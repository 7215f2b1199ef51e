-- Advances lanes of one shard towards observed offsets (advance_watermark, advance_watermarks):
-- a lane's watermark moves to its `through` when every source above the watermark and at or
-- below `through` has its lane work complete. Never moves back. The shard's sources are read
-- once for all the lanes of the call: each source's dispatch is looked up once, and the work
-- counts of the lanes still moving that it has work in (its `<id>:lanes` field) with one HMGET.
-- A source costs work in proportion to its lanes with work, not to the lanes moving (a record
-- of a small group has work in one or two of 64); the watermarks that moved are written with
-- one HSET.
--
-- One call inspects at most ARGV[1] sources (bounding its run time): a lane whose `through` lies
-- beyond them, all complete, moves to the last source inspected and answers 'more'; the caller
-- calls again for it. The lowest watermark among the lanes rises with every such call, so the
-- calls end.
--
-- KEYS[1] watermarks HASH (lane -> offset), KEYS[2] sources ZSET, KEYS[3] src HASH,
-- KEYS[4] work HASH (<id> -> max observed offset, <id>:<lane> -> chunks of the lane not complete,
--   <id>:lanes -> the lanes with work, comma-separated; absent for dispatches an earlier release began)
-- KEYS[5] incarnation marker of the shard
-- ARGV[1] most sources inspected, ARGV[2] fence (mailbox_fence_prelude.lua),
-- ARGV[3..] pairs: lane, through (decimal offset); a lane named once
-- Reply: {'lost'}, {'corrupt', reason} (a source or dispatch every lane relies on is malformed),
-- or {'ok', r1, r2, ...}: one answer per pair, in order, each {'ok', watermark},
-- {'more', watermark}, {'invalid'} (no dispatch was observed at `through`), {'conflict', offset}
-- or {'corrupt', reason}.
if not fence_holds(KEYS[5], ARGV[2]) then
  return {'lost'}
end
local limit = tonumber(ARGV[1])
local names, throughs = {}, {}
for i = 3, #ARGV, 2 do
  names[#names + 1] = ARGV[i]
  throughs[#throughs + 1] = ARGV[i + 1]
end
if #names == 0 then
  return {'ok'}
end
local currents = redis.call('HMGET', KEYS[1], unpack(names))
local observed = redis.call('HMGET', KEYS[3], unpack(throughs))

local answers = {}
local moving = {}
local low, high = nil, nil
for k, lane in ipairs(names) do
  local through = tonumber(throughs[k])
  local cur = currents[k]
  local c = cur and tonumber(cur)
  if cur and not c then
    answers[k] = {'corrupt', 'lane ' .. lane .. ' watermark ' .. cur .. ' is not a number'}
  elseif c and through <= c then
    answers[k] = {'ok', cur}
  elseif not observed[k] then
    answers[k] = {'invalid'}
  else
    moving[#moving + 1] = {k = k, lane = lane, cur = c or -1, through = through}
    if low == nil or (c or -1) < low then
      low = c or -1
    end
    if high == nil or through > high then
      high = through
    end
  end
end

if #moving > 0 then
  -- The moving lanes by name, and how many of them no source stopped yet.
  local by_lane = {}
  for _, m in ipairs(moving) do
    by_lane[m.lane] = m
  end
  local active = #moving
  -- Whether `m` still moves and source `o` lies on its way.
  local function on_way_of(m, o)
    return m and not m.stopped and m.cur < o and o <= m.through
  end
  local min = '-inf'
  if low >= 0 then
    min = '(' .. string.format('%d', low)
  end
  local offs = redis.call('ZRANGEBYSCORE', KEYS[2], min, string.format('%d', high), 'LIMIT', 0, limit)
  local last = nil
  for _, off in ipairs(offs) do
    local o = tonumber(off)
    if active == 0 then
      -- Every lane stopped: nothing beyond this source can move one.
      break
    end
    local id = redis.call('HGET', KEYS[3], off)
    if not id then
      return {'corrupt', 'source offset ' .. off .. ' names no dispatch'}
    end
    local head = redis.call('HMGET', KEYS[4], id, id .. ':lanes')
    if not head[1] then
      return {'corrupt', 'source offset ' .. off .. ' names dispatch ' .. id .. ' which is gone'}
    end
    -- The lanes whose work count this source decides: those it has work in (every moving lane
    -- for a dispatch an earlier release began, which lists none) that it lies on the way of.
    local read = {}
    if head[2] then
      for lane in string.gmatch(head[2], '%d+') do
        local m = by_lane[lane]
        if on_way_of(m, o) then
          read[#read + 1] = m
        end
      end
    else
      for _, m in ipairs(moving) do
        if on_way_of(m, o) then
          read[#read + 1] = m
        end
      end
    end
    if #read > 0 then
      local fields = {}
      for j, m in ipairs(read) do
        fields[j] = id .. ':' .. m.lane
      end
      local lefts = redis.call('HMGET', KEYS[4], unpack(fields))
      for j, m in ipairs(read) do
        local left = lefts[j]
        if left then
          local n = tonumber(left)
          if not n then
            answers[m.k] = {'corrupt', 'dispatch ' .. id .. ' lane ' .. m.lane .. ' work count ' .. left .. ' is not a number'}
            m.stopped = true
            active = active - 1
          elseif n > 0 then
            answers[m.k] = {'conflict', off}
            m.stopped = true
            active = active - 1
          end
        end
      end
    end
    last = o
  end
  local truncated = #offs >= limit
  local moved = {}
  for _, m in ipairs(moving) do
    if not m.stopped then
      if truncated and m.through > last then
        -- Every source inspected above its watermark is complete; the rest wait for the next call.
        local reached = m.cur
        if last > m.cur then
          reached = last
          moved[#moved + 1] = m.lane
          moved[#moved + 1] = string.format('%d', last)
        end
        answers[m.k] = {'more', string.format('%d', reached)}
      else
        moved[#moved + 1] = m.lane
        moved[#moved + 1] = string.format('%d', m.through)
        answers[m.k] = {'ok', string.format('%d', m.through)}
      end
    end
  end
  if #moved > 0 then
    redis.call('HSET', KEYS[1], unpack(moved))
  end
end

local reply = {'ok'}
for k = 1, #names do
  reply[#reply + 1] = answers[k]
end
return reply
