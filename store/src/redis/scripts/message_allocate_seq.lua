-- Issues the next seq of a conversation, unless Redis may have lost the counter.
--
-- KEYS[1]  the seq counter          <ns>:{c:<tenant><conv>}:seq
-- KEYS[2]  the seed marker of the counter's slot (see seeding.rs)
-- KEYS[3]  the history index        <ns>:{c:<tenant><conv>}:idx
-- KEYS[4]  the hot-tier lower bound <ns>:{c:<tenant><conv>}:lowbound
--
-- Replies:
--   {'ok', seq}             the issued seq
--   {'unseeded', reason}    the slot's marker is gone (Redis lost state or was never seeded),
--                           or the counter is gone while the conversation still has history:
--                           INCR would reissue seqs, so nothing is issued until a re-seed
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {'unseeded', 'no seed marker for this slot: Redis lost state or was never seeded'}
end
if redis.call('EXISTS', KEYS[1]) == 0 and (redis.call('EXISTS', KEYS[3]) == 1 or redis.call('EXISTS', KEYS[4]) == 1) then
  return {'unseeded', 'the seq counter is gone while the conversation still has history'}
end
return {'ok', redis.call('INCR', KEYS[1])}
