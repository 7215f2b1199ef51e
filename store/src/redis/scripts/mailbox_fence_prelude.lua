-- Put in front of the dispatch-bookkeeping scripts a dispatcher fences (mailbox.rs,
-- `fenced_script`, after serving_prelude.lua). A fence is the shard's incarnation marker as the
-- caller found it when it took the shard over ('' = unfenced). It holds while the marker is
-- still that one and still of the copy of the data serving now: a restart that lost the last
-- writes, a restore, a failover or a flush all break it, though nothing rewrote the marker yet.
local function fence_holds(marker_key, fence)
  if fence == '' then
    return true
  end
  local marker = redis.call('GET', marker_key)
  if marker ~= fence then
    return false
  end
  local run = serving()
  return string.sub(marker, 1, #run + 1) == run .. ':'
end
