-- Put in front of every script that asks which copy of the data it runs on (mod.rs,
-- `serving_script`). The answer is the Redis process's run_id (new at every start) followed by
-- its replication id (new at every promotion of a replica, and taken over from the master by a
-- full resync). Whenever the data under a script may have been replaced by another copy (a
-- restart that loaded an older file, a failover to a replica that missed writes, a failed-over
-- master that resynced from the new one and was promoted again) the answer changes, so
-- anything stamped with the old answer (a seq lease, a member cache, a shard's incarnation)
-- stops being trusted. It changes at other times too (a replica promoted with nothing lost, a
-- master's first replica attaching), which costs a revalidation, never safety.

-- The hex value of `field` in INFO `section`, found by a plain search and an anchored match: a
-- pattern search over the whole section costs more than the INFO itself, in every script that
-- asks (two per send).
local function info_hex(section, field)
  local text = redis.call('INFO', section)
  local at = string.find(text, field .. ':', 1, true)
  local value = at and string.match(text, '^%x+', at + #field + 1)
  if not value then
    error('INFO ' .. section .. ' names no ' .. field)
  end
  return value
end

local serving_copy = nil
local function serving()
  if not serving_copy then
    serving_copy = info_hex('server', 'run_id') .. info_hex('replication', 'master_replid')
  end
  return serving_copy
end

