-- fencegate redisfence: move a fence stored by an earlier version at
-- KEYS[1] (<key>:fence) to KEYS[2] (fencegate.fence:<key>), keeping the
-- higher of the two; the stored fence only rises. Returns the fence now
-- stored at KEYS[2] (false when neither holds one). The old key is left
-- alone: delete it once every writer runs the new version.
local old = redis.call('GET', KEYS[1])
local cur = redis.call('GET', KEYS[2])
if cur and not tonumber(cur) then return redis.error_reply('redisfence: the fence key holds no fence') end
if old and #old <= 15 and string.match(old, '^%d+$') and (not cur or tonumber(old) > tonumber(cur)) then
  redis.call('SET', KEYS[2], string.format('%015d', tonumber(old)))
  return redis.call('GET', KEYS[2])
end
return cur
