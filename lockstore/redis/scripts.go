package redis

import (
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Every lock operation is one of these scripts, run with EVALSHA through
// the dispatcher (dispatch.go: concurrent callers' scripts share a
// pipeline), which sends a script again as EVAL on NOSCRIPT, e.g. after
// SCRIPT FLUSH or a failover to a replica that never loaded them. A script runs atomically and reads the
// clock with TIME, so Redis is the only time authority: the lockId→key
// resolution, the ownership and liveness checks and the mutation happen in
// one step that no other client can interleave with (the TOCTOU rule).
//
// The scripts touch keys they read from the lockId index, which KEYS does not
// declare; that is fine on a single server or behind Sentinel, and on a
// cluster only because the cluster layout puts the index and the lock in one
// slot (cluster.go), where Redis allows an undeclared key.
//
// Replies use Lua false for "absent" (a nil reply) and small integer status
// codes; numbers stay below 2^53, where Lua's doubles are exact.

// Each script carries only the Lua it uses, written out in place: Redis
// runs a script's whole body on every call, so helper functions defined in
// a shared prelude would be allocated (and garbage-collected) per call. The
// pieces every lock script repeats are these, and must stay identical:
//
//   - the clock: t = TIME; now = t[1] * 1000 + floor(t[2] / 1000) (the
//     strings coerce exactly as tonumber would);
//   - the liveness predicate: live iff expiresAtMs > now - 1000 (written
//     as "not (exp > now - 1000)" for the negation, so that a NaN a foreign
//     writer stored counts as not live, as it always has);
//   - decoding a stored value: pcall(cjson.decode), and a value is a lock
//     only if it decodes to a table with a numeric expiresAtMs and a string
//     lockId;
//   - SyncGuard's lock value, built by hand so integers never pass through
//     cjson's 14-significant-digit number formatting:
//     {"lockId":…,"expiresAtMs":%d,"acquiredAtMs":%d,"key":…,"fence":…}
//     where lockId, key and fence are JSON strings as cjson.encode writes
//     them. A lockId (22 base64url characters, validated in Go) and a fence
//     ('%015d' of a non-negative counter) contain nothing cjson escapes, so
//     they are quoted directly; the user key always goes through
//     cjson.encode (it escapes '"', '\\', '/' and control bytes).
//     TestValueEncoding holds the bytes to the old cjson-built value.
//
// The liveness tolerance, 1000 ms, is lockstore.TimeToleranceMs.

// Acquire status codes (a successful acquire replies with a string).
const (
	acquireLocked   = 0
	acquireOverflow = -1 // the counter would pass FenceMax; nothing written
	acquireCorrupt  = -2 // the lock key holds something that is not a lock
	acquireBadFence = -3 // the counter key holds something that is not an integer
	acquireBehind   = -4 // the fence would lead the clock floor by more than FloorLeadMax; nothing written; the reply is {-4, lead}
)

// acquireScript takes a free key.
//
// KEYS: lockKey, indexKey, fenceKey
// ARGV: lockId, ttlMs, normalized user key, ttlMs+tolerance, floor
// →     "<fence>:<expiresAtMs>" | 0 | negative status | {-4, lead}
//
// floor is "1" for the clock floor (backend.NextFenceAt) or "0" for
// counter+1.
//
// The success reply is one string rather than a table: Redis builds an
// array reply from a script with a deferred length, which costs it a reply
// buffer allocation and a writev per call.
//
// The overflow and lead checks read the counter before writing it, so a
// refused acquire writes nothing; FenceMax, the floor's epoch, rate and lead
// cap are written into the script. The counter is written with SET (the
// floor may move it by more than one); SyncGuard's own INCR continues from
// it. Redis replicates a script's effects, not the script, so replicas and
// the AOF get the SET of the value TIME produced here. Both keys get PX
// ttl+tolerance (computed in Go, so no number is formatted for it here):
// Redis drops them exactly when the liveness predicate stops calling the
// lock live.
var acquireScript = newScript(fmt.Sprintf(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local raw = redis.call('GET', KEYS[1])
if raw then
  local ok, d = pcall(cjson.decode, raw)
  if not ok or type(d) ~= 'table' or type(d.expiresAtMs) ~= 'number' or type(d.lockId) ~= 'string' then
    return -2
  end
  if d.expiresAtMs > now - 1000 then return 0 end
end
local n = 0
local cur = redis.call('GET', KEYS[3])
if cur then
  n = tonumber(cur)
  if n == nil or n ~= math.floor(n) or n < 0 then return -3 end
end
if n + 1 > %[1]d then return -1 end
local fence = n + 1
if ARGV[5] == '1' then
  local fl = 0
  if now > %[2]d then fl = (now - %[2]d) * %[3]d end
  if fence - fl > %[4]d then return {-4, fence - fl} end
  if fl > %[1]d then return -1 end
  if fl > fence then fence = fl end
end
redis.call('SET', KEYS[3], string.format('%%d', fence))
local exp = now + ARGV[2]
redis.call('SET', KEYS[1], '{"lockId":"' .. ARGV[1] ..
  string.format('","expiresAtMs":%%d,"acquiredAtMs":%%d,"key":', exp, now) .. cjson.encode(ARGV[3]) ..
  string.format(',"fence":"%%015d"}', fence), 'PX', ARGV[4])
redis.call('SET', KEYS[2], KEYS[1], 'PX', ARGV[4])
return string.format('%%d:%%d', fence, exp)
`, lockstore.FenceMax, backend.FloorEpochMs, backend.FloorPerMs, backend.FloorLeadMax))

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
var releaseScript = newScript(`
local lockKey = redis.call('GET', KEYS[1])
if not lockKey then return 0 end
local raw = redis.call('GET', lockKey)
if not raw then return 0 end
local ok, d = pcall(cjson.decode, raw)
-- docs/design.md, "Ownership re-verified": the index could be stale; the lock must name this lockId.
if not ok or type(d) ~= 'table' or type(d.expiresAtMs) ~= 'number' or d.lockId ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
if not (d.expiresAtMs > t[1] * 1000 + math.floor(t[2] / 1000) - 1000) then return -1 end
redis.call('DEL', lockKey, KEYS[1])
return 1
`)

// extendScript sets a live lock's expiry to now+ttl (it replaces the TTL).
//
// KEYS: indexKey
// ARGV: lockId, ttlMs, ttlMs+tolerance
// →     {1, expiresAtMs} | {0} | {-1}
var extendScript = newScript(`
local lockKey = redis.call('GET', KEYS[1])
if not lockKey then return {0} end
local raw = redis.call('GET', lockKey)
if not raw then return {0} end
local ok, d = pcall(cjson.decode, raw)
if not ok or type(d) ~= 'table' or type(d.expiresAtMs) ~= 'number' or d.lockId ~= ARGV[1] then return {0} end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if not (d.expiresAtMs > now - 1000) then return {-1} end
local exp = now + ARGV[2]
local acq = tonumber(d.acquiredAtMs) or now
-- d.key and d.fence are whatever the acquiring writer stored (SyncGuard's
-- own encoder among them), so they go through cjson.encode.
redis.call('SET', lockKey, '{"lockId":"' .. ARGV[1] ..
  string.format('","expiresAtMs":%d,"acquiredAtMs":%d,"key":', exp, acq) .. cjson.encode(d.key) ..
  ',"fence":' .. cjson.encode(d.fence) .. '}', 'PX', ARGV[3])
redis.call('SET', KEYS[1], lockKey, 'PX', ARGV[3])
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
var readKeyScript = newScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local raw = redis.call('GET', KEYS[1])
if raw and ARGV[1] == '1' then
  local ok, d = pcall(cjson.decode, raw)
  if ok and type(d) == 'table' and type(d.expiresAtMs) == 'number' and type(d.lockId) == 'string' and now - d.expiresAtMs > 2000 then
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
var readLockIDScript = newScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local lockKey = redis.call('GET', KEYS[1])
if not lockKey then return {false, now} end
local raw = redis.call('GET', lockKey)
if not raw then return {false, now} end
local ok, d = pcall(cjson.decode, raw)
if not ok or type(d) ~= 'table' or type(d.expiresAtMs) ~= 'number' or d.lockId ~= ARGV[1] then return {false, now} end
return {raw, now}
`)

// inspectScript reads a key's lock and its fence counter at one instant.
//
// KEYS: lockKey, fenceKey
// →     {value|nil, counter|nil, nowMs}
var inspectScript = newScript(`
local t = redis.call('TIME')
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), t[1] * 1000 + math.floor(t[2] / 1000)}
`)

// appendAuditScript adds audit events to the two class streams and trims
// each by its own count (approximately, MAXLEN ~) and both by age (MINID ~
// now-maxAge, using the server clock that also stamped the entry IDs), the
// age even for a stream this batch did not add to.
//
// KEYS: decision stream, input stream
// ARGV: maxDecision, maxInput, maxAgeMs, then (class, keyHash, keyDigest,
// event JSON) quadruples, class "d" or "i"
// →     number of entries added
var appendAuditScript = newScript(`
local maxLen = {d = ARGV[1], i = ARGV[2]}
local key = {d = KEYS[1], i = KEYS[2]}
local maxAge = tonumber(ARGV[3])
local n = 0
for i = 4, #ARGV, 4 do
  local c = ARGV[i]
  redis.call('XADD', key[c], 'MAXLEN', '~', maxLen[c], '*',
    'keyHash', ARGV[i + 1], 'keyDigest', ARGV[i + 2], 'event', ARGV[i + 3])
  n = n + 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Both streams age out on every append, so a class that gets no new
-- events still loses its old ones.
for _, k in ipairs(KEYS) do
  redis.call('XTRIM', k, 'MINID', '~', string.format('%d', now - maxAge))
end
return n
`)

// moveAuditScript renames the audit stream from its pre-1.0 key to its own
// one, if the old key is a stream and the new one does not exist.
//
// KEYS: old key, new key
// →     1 if renamed, else 0
var moveAuditScript = newScript(`
if redis.call('TYPE', KEYS[1]).ok == 'stream' and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('RENAME', KEYS[1], KEYS[2])
  return 1
end
return 0
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
	readLockIDScript, inspectScript, appendAuditScript, moveAuditScript,
	admitScript, finishScript, // barrier.go
}
