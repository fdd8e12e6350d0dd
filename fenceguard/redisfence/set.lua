-- fencegate redisfence: one fenced SET (fenceguard/redisfence, @fencegate/guard).
-- KEYS[1] the value, KEYS[2] its fence ("fencegate.fence:" .. KEYS[1]);
-- ARGV[1] the fence (15 digits, at least 1), ARGV[2] the value, ARGV[3] the
-- value's TTL in ms ("0": none). Returns {1, fence} when applied, {0, stored}
-- when a higher fence is stored. A script runs alone: the comparison and both
-- SETs are one step. Fences are below 2^53, so tonumber compares them exactly.
local stored = redis.call('GET', KEYS[2])
if stored then
  local s = tonumber(stored)
  if not s then return redis.error_reply('redisfence: the fence key holds no fence') end
  if s > tonumber(ARGV[1]) then return {0, stored} end
end
redis.call('SET', KEYS[2], ARGV[1])
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return {1, ARGV[1]}
