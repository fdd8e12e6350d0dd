package redis

import (
	goredis "github.com/redis/go-redis/v9"
)

// Every lock operation is one of these scripts, run with EVALSHA (go-redis
// falls back to EVAL on NOSCRIPT, e.g. after SCRIPT FLUSH or a failover to a
// replica that never loaded them). A script runs atomically and reads the
// clock with TIME, so Redis is the only time authority: the lockId→key
// resolution, the ownership and liveness checks and the mutation happen in
// one step that no other client can interleave with (the TOCTOU rule).
//
// The scripts touch keys they read from the lockId index, which KEYS does not
// declare; that is fine on a single server or behind Sentinel, and is why
// Redis Cluster is not supported.
//
// Replies use Lua false for "absent" (a nil reply) and small integer status
// codes; numbers stay below 2^53, where Lua's doubles are exact.

// luaPrelude is shared by every script.
const luaPrelude = `
local TOLERANCE = 1000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- decode returns the lock table of a stored value, or nil when the value is
-- not a lock (corrupt, or another kind of key that collides with this name).
local function decode(raw)
  local ok, d = pcall(cjson.decode, raw)
  if not ok or type(d) ~= 'table' or type(d.expiresAtMs) ~= 'number' or type(d.lockId) ~= 'string' then
    return nil
  end
  return d
end

local function live(d, now)
  return d.expiresAtMs > now - TOLERANCE
end

-- encode writes SyncGuard's lock value. It is built by hand so integers
-- never pass through cjson's 14-significant-digit number formatting.
local function encode(lockId, exp, acq, key, fence)
  return '{"lockId":' .. cjson.encode(lockId) ..
    ',"expiresAtMs":' .. string.format('%d', exp) ..
    ',"acquiredAtMs":' .. string.format('%d', acq) ..
    ',"key":' .. cjson.encode(key) ..
    ',"fence":' .. cjson.encode(fence) .. '}'
end
`

// Acquire status codes.
const (
	acquireOK       = 1
	acquireLocked   = 0
	acquireOverflow = -1 // the counter would pass FenceMax; nothing written
	acquireCorrupt  = -2 // the lock key holds something that is not a lock
	acquireBadFence = -3 // the counter key holds something that is not an integer
)

// acquireScript takes a free key.
//
// KEYS: lockKey, indexKey, fenceKey
// ARGV: lockId, ttlMs, normalized user key, FenceMax
// →     {1, fence, expiresAtMs, nowMs} | {0} | {negative status}
//
// The overflow check reads the counter before INCR, so a refused acquire
// writes nothing. Both keys get PX ttl+tolerance: Redis drops them exactly
// when the liveness predicate stops calling the lock live.
var acquireScript = newScript(luaPrelude + `
local now = now_ms()
local raw = redis.call('GET', KEYS[1])
if raw then
  local d = decode(raw)
  if d == nil then return {-2} end
  if live(d, now) then return {0} end
end
local n = 0
local cur = redis.call('GET', KEYS[3])
if cur then
  n = tonumber(cur)
  if n == nil or n ~= math.floor(n) or n < 0 then return {-3} end
end
if n + 1 > tonumber(ARGV[4]) then return {-1} end
local fence = redis.call('INCR', KEYS[3])
local ttl = tonumber(ARGV[2])
local exp = now + ttl
redis.call('SET', KEYS[1], encode(ARGV[1], exp, now, ARGV[3], string.format('%015d', fence)), 'PX', ttl + TOLERANCE)
redis.call('SET', KEYS[2], KEYS[1], 'PX', ttl + TOLERANCE)
return {1, fence, exp, now}
`)

// Release/extend status codes.
const (
	mutateOK       = 1
	mutateNotFound = 0  // no index, no lock, or the lock is not this lockId's
	mutateExpired  = -1 // this lockId's lock, past the liveness predicate
)

// releaseScript drops the lock a lockId holds.
//
// KEYS: indexKey
// ARGV: lockId
// →     1 | 0 | -1
var releaseScript = newScript(luaPrelude + `
local now = now_ms()
local lockKey = redis.call('GET', KEYS[1])
if not lockKey then return 0 end
local raw = redis.call('GET', lockKey)
if not raw then return 0 end
local d = decode(raw)
-- ADR-003: the index could be stale; the lock must name this lockId.
if d == nil or d.lockId ~= ARGV[1] then return 0 end
if not live(d, now) then return -1 end
redis.call('DEL', lockKey, KEYS[1])
return 1
`)

// extendScript sets a live lock's expiry to now+ttl (it replaces the TTL).
//
// KEYS: indexKey
// ARGV: lockId, ttlMs
// →     {1, expiresAtMs} | {0} | {-1}
var extendScript = newScript(luaPrelude + `
local now = now_ms()
local lockKey = redis.call('GET', KEYS[1])
if not lockKey then return {0} end
local raw = redis.call('GET', lockKey)
if not raw then return {0} end
local d = decode(raw)
if d == nil or d.lockId ~= ARGV[1] then return {0} end
if not live(d, now) then return {-1} end
local ttl = tonumber(ARGV[2])
local exp = now + ttl
local acq = tonumber(d.acquiredAtMs) or now
redis.call('SET', lockKey, encode(d.lockId, exp, acq, d.key, d.fence), 'PX', ttl + TOLERANCE)
redis.call('SET', KEYS[1], lockKey, 'PX', ttl + TOLERANCE)
return {1, exp}
`)

// readKeyScript reads a key's lock value with the server clock; the caller
// applies the liveness predicate. It is IsLocked and LookupKey.
//
// KEYS: lockKey
// ARGV: cleanup ("1" or "0"), index key prefix ("" when lockId index keys
//
//	are hashed and cannot be derived here)
//
// →     {value|nil, nowMs}
//
// With cleanup on, a lock more than 2000 ms past expiry is deleted along
// with its index (if the index still points at it). Counters are never
// touched.
var readKeyScript = newScript(luaPrelude + `
local now = now_ms()
local raw = redis.call('GET', KEYS[1])
if raw and ARGV[1] == '1' then
  local d = decode(raw)
  if d ~= nil and now - d.expiresAtMs > 2000 then
    redis.call('DEL', KEYS[1])
    if ARGV[2] ~= '' and string.match(d.lockId, '^[A-Za-z0-9_-]+$') and #d.lockId == 22 then
      local idx = ARGV[2] .. d.lockId
      if redis.call('GET', idx) == KEYS[1] then redis.call('DEL', idx) end
    end
  end
end
return {raw, now}
`)

// readLockIDScript resolves a lockId and reads its lock atomically (the
// index and the lock are two keys).
//
// KEYS: indexKey
// ARGV: lockId
// →     {value|nil, nowMs}
var readLockIDScript = newScript(luaPrelude + `
local now = now_ms()
local lockKey = redis.call('GET', KEYS[1])
if not lockKey then return {false, now} end
local raw = redis.call('GET', lockKey)
if not raw then return {false, now} end
local d = decode(raw)
if d == nil or d.lockId ~= ARGV[1] then return {false, now} end
return {raw, now}
`)

// inspectScript reads a key's lock and its fence counter at one instant.
//
// KEYS: lockKey, fenceKey
// →     {value|nil, counter|nil, nowMs}
var inspectScript = newScript(luaPrelude + `
local now = now_ms()
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), now}
`)

// appendAuditScript adds audit events to the stream and trims it by count
// (approximately, MAXLEN ~) and by age (MINID ~ now-maxAge, using the server
// clock that also stamped the entry IDs).
//
// KEYS: stream
// ARGV: maxEvents, maxAgeMs, then keyHash, event JSON pairs
// →     number of entries added
var appendAuditScript = newScript(`
local maxLen = ARGV[1]
local maxAge = tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV, 2 do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', maxLen, '*', 'keyHash', ARGV[i], 'event', ARGV[i + 1])
  n = n + 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('XTRIM', KEYS[1], 'MINID', '~', string.format('%d', now - maxAge))
return n
`)

// script is a go-redis Script that keeps its source, so Open can load it
// with SCRIPT LOAD in a pipeline. (Script.Load on a pipeline would record
// the not-yet-known reply, an empty digest, as the script's hash.)
type script struct {
	*goredis.Script
	src string
}

func newScript(src string) script { return script{Script: goredis.NewScript(src), src: src} }

// allScripts are loaded into the server's script cache at Open.
var allScripts = []script{
	acquireScript, releaseScript, extendScript, readKeyScript,
	readLockIDScript, inspectScript, appendAuditScript,
	admitScript, // barrier.go
}
