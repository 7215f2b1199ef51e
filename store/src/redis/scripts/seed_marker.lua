-- Writes or checks one cluster slot's seed marker (see seeding.rs).
--
-- A marker names the Redis process that was seeded (its run_id): after a restart, a failover
-- or a restore the run_id differs, so the slot counts as unseeded until the seq counters are
-- re-seeded from durable evidence. (A restart that lost nothing costs one re-seed; one that
-- rolled counters back can not reissue a seq.)
--
-- KEYS[1]  the marker of one slot
-- ARGV[1]  'write' or 'check'
-- ARGV[2]  (write) the seeding time, ms
--
-- Replies: 1 (written, or valid) | 0 (missing or of another process)
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if ARGV[1] == 'write' then
  redis.call('SET', KEYS[1], run .. ':' .. ARGV[2])
  return 1
end
local marker = redis.call('GET', KEYS[1])
if marker and string.sub(marker, 1, #run + 1) == run .. ':' then
  return 1
end
return 0
