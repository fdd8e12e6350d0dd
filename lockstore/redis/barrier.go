package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// The write barrier's entries of a key live beside SyncGuard's keys, under
// the lock's storage key L, indexed so that an Admit costs O(log n) in the
// key's entries, never a walk over them:
//
//   - <prefix>.fencegate:wdeadline:L, a sorted set: member = write id,
//     score = deadline (ms). Expired entries are the lowest scores (pruned
//     BarrierPruneBatch at a time by ZRANGEBYSCORE … LIMIT + ZREM), the
//     unfinished count is one ZCOUNT, the latest deadline one ZREVRANGE.
//   - <prefix>.fencegate:wfence:L, a sorted set: member = write id,
//     score = fence. "Is any entry under a lower fence?" is one ZCOUNT.
//
// Both carry a PEXPIRE past their latest deadline, so a key whose writes all
// finished or expired leaves nothing behind even if no later Admit prunes it.
//
// <prefix>.fencegate:writes:L, a hash (field = write id, value =
// "<fence>:<deadlineMs>"), is where earlier versions kept every entry and
// walked them all on each Admit. It stays, for a fleet mid-rollout:
//   - entries an older gateway registers there are moved into the index by
//     the next Admit here, at most BarrierPruneBatch per Admit; while some
//     are left, a matching fence is refused as blocked (their fences are
//     not looked at) until the hash's PTTL — never admitted early;
//   - every Admit here that registers a write also writes one summary field
//     there, barrierSummaryField = "<admitted fence>:<latest deadline>":
//     an older gateway reads it as one entry under the admitted fence, so
//     it keeps newer fences out while any write admitted here may be in
//     flight (all unfinished entries are under that fence or a newer one:
//     it was admitted only when no older one was left). Finish removes the
//     field when the index is empty.
//   An older gateway's Finish of an entry already moved into the index does
//   not reach it: that entry then blocks newer fences until its deadline.

// barrierSummaryField is the field of the legacy hash that summarises the
// index for older gateways (not a write id: those are 22 characters of
// base64url, and this has a ':').
const barrierSummaryField = "fencegate:index"

// Admit script status codes.
const (
	admitAdmitted    = 1
	admitNoMatch     = 0
	admitBlocked     = 2
	admitFull        = 3  // matched, unblocked, but the key has MaxInFlight entries in flight
	admitCorruptLock = -2 // the lock key holds something that is not a lock
	admitBadFence    = -3 // the counter key holds something that is not an integer
	admitBadEntry    = -4 // an entry of the legacy hash is not "<fence>:<deadlineMs>"
)

// admitScript reads the key's state as inspectScript does and applies the
// barrier rule at the same server instant. Its work is bounded whatever
// the number of entries: a fixed number of O(log n) sorted-set commands
// plus at most ARGV[6] (BarrierPruneBatch) removals and legacy moves.
//
// KEYS: lockKey, fenceKey, legacyKey, deadlineKey, fenceIndexKey
// ARGV: fence, requireLive ("1"|"0"), writeId, maxWriteMs, maxInFlight, pruneBatch
// →     {lock value|false, counter|false, nowMs, status, blocking, blockedUntilMs}
//
// The match here must be lockstore.WriteAdmission.Matches on the state
// Inspect derives from the same two values (Go re-derives the state from
// them and checks that it agrees): the live fence is the lock's while
// expiresAt > now - tolerance; the latest fence is the counter, raised to
// the live lock's fence if a hand-reset counter reads lower.
var admitScript = newScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local nowS = string.format('%d', now)
local raw = redis.call('GET', KEYS[1])
local cur = redis.call('GET', KEYS[2])
local liveFence = nil
if raw then
  local ok, d = pcall(cjson.decode, raw)
  if not ok or type(d) ~= 'table' or type(d.expiresAtMs) ~= 'number' or type(d.lockId) ~= 'string' then
    return {raw, cur, now, -2, 0, 0}
  end
  if d.expiresAtMs > now - 1000 and type(d.fence) == 'string' then liveFence = d.fence end
end
local latest = nil
if cur then
  local n = tonumber(cur)
  if n == nil or n ~= math.floor(n) or n < 0 then return {raw, cur, now, -3, 0, 0} end
  if n > 0 then latest = string.format('%015d', n) end
end
if liveFence and #liveFence == 15 and string.match(liveFence, '^%d+$') and (latest == nil or tonumber(latest) < tonumber(liveFence)) then
  latest = liveFence
end
local fence = ARGV[1]
local match
if ARGV[2] == '1' then match = (liveFence == fence) else match = (latest == fence) end

local H, ZD, ZF = KEYS[3], KEYS[4], KEYS[5]
local SUM = 'fencegate:index'
local batch = tonumber(ARGV[6])
local touched = false
-- Entries an older gateway registered in the legacy hash: move a bounded
-- batch into the index.
local legacy = redis.call('HLEN', H)
if legacy > 0 and redis.call('HEXISTS', H, SUM) == 1 then legacy = legacy - 1 end
if legacy > 0 then
  local kv
  if legacy < batch then kv = redis.call('HGETALL', H) else kv = redis.call('HRANDFIELD', H, batch, 'WITHVALUES') end
  -- Every entry of the batch is checked before any is moved, so a corrupt
  -- one refuses the admit without writing half a batch.
  for i = 1, #kv, 2 do
    local v = kv[i + 1]
    if kv[i] ~= SUM and (#v < 17 or string.sub(v, 16, 16) ~= ':' or tonumber(string.sub(v, 17)) == nil or tonumber(string.sub(v, 1, 15)) == nil) then
      return {raw, cur, now, -4, 0, 0}
    end
  end
  local moved = {}
  for i = 1, #kv, 2 do
    local id, v = kv[i], kv[i + 1]
    if id ~= SUM then
      local dl = tonumber(string.sub(v, 17))
      if dl > now then
        redis.call('ZADD', ZD, string.sub(v, 17), id)
        redis.call('ZADD', ZF, string.sub(v, 1, 15), id)
        touched = true
      end
      moved[#moved + 1] = id
    end
  end
  if #moved > 0 then redis.call('HDEL', H, unpack(moved)) end
  legacy = legacy - #moved
end
-- Expired entries count as finished; remove a bounded batch of them.
local gone = redis.call('ZRANGEBYSCORE', ZD, '-inf', nowS, 'LIMIT', 0, batch)
if #gone > 0 then
  redis.call('ZREM', ZD, unpack(gone))
  redis.call('ZREM', ZF, unpack(gone))
end
local lastDl = 0
if touched or match then
  local top = redis.call('ZREVRANGE', ZD, 0, 0, 'WITHSCORES')
  if top[2] then lastDl = tonumber(top[2]) end
end
if touched and lastDl > now then
  local ttl = string.format('%d', lastDl - now + 1000)
  redis.call('PEXPIRE', ZD, ttl)
  redis.call('PEXPIRE', ZF, ttl)
end
if not match then return {raw, cur, now, 0, 0, 0} end

local live = redis.call('ZCOUNT', ZD, '(' .. nowS, '+inf')
local blocking, blockedUntil = 0, 0
if legacy > 0 then
  -- Not yet moved, fences not looked at: assume older.
  blocking = legacy
  local pt = redis.call('PTTL', H)
  if pt > 0 then blockedUntil = now + pt else blockedUntil = now + 1000 end
end
if live > 0 then
  local lower = redis.call('ZCOUNT', ZF, '-inf', '(' .. fence)
  if lower > 0 then
    if redis.call('ZCOUNT', ZD, '-inf', nowS) == 0 then
      blocking = blocking + lower -- none expired is left: exact
    else
      blocking = blocking + math.min(lower, live) -- some may be expired ones beyond this batch
    end
    if lastDl > blockedUntil then blockedUntil = lastDl end
  end
end
if blocking > 0 then return {raw, cur, now, 2, blocking, blockedUntil} end
if live >= tonumber(ARGV[5]) and not redis.call('ZSCORE', ZD, ARGV[3]) then
  return {raw, cur, now, 3, 0, 0}
end
local deadline = now + tonumber(ARGV[4])
if deadline > lastDl then lastDl = deadline end
redis.call('ZADD', ZD, string.format('%d', deadline), ARGV[3])
redis.call('ZADD', ZF, fence, ARGV[3])
-- Past the last deadline every entry counts as finished; the keys may go.
-- The tolerance is slack between TIME and the expiry clock.
local ttl = lastDl - now + 1000
local ttlS = string.format('%d', ttl)
redis.call('PEXPIRE', ZD, ttlS)
redis.call('PEXPIRE', ZF, ttlS)
redis.call('HSET', H, SUM, fence .. ':' .. string.format('%d', lastDl))
if redis.call('PTTL', H) < ttl then redis.call('PEXPIRE', H, ttlS) end
return {raw, cur, now, 1, 0, 0}
`)

// finishScript removes one entry from the index and from the legacy hash
// (an older gateway may have registered it there), and the legacy hash's
// summary once the index is empty: O(log n).
//
// KEYS: legacyKey, deadlineKey, fenceIndexKey
// ARGV: writeId
var finishScript = newScript(`
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('HDEL', KEYS[1], 'fencegate:index') end
return 1
`)

var _ lockstore.WriteBarrier = (*Store)(nil)

// barrierKeys returns the storage keys of the barrier entries of the lock
// stored under lockKey: the legacy hash and the two indexes.
func (s *Store) barrierKeys(lockKey string) (legacy, deadlines, fences string) {
	return s.ownKey("writes:" + lockKey), s.ownKey("wdeadline:" + lockKey), s.ownKey("wfence:" + lockKey)
}

// Admit applies the write barrier in one EVALSHA: the key's state is read
// and the write registered at one server instant, by the server clock.
func (s *Store) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	const op = "admit"
	norm, maxMs, err := backend.PrecheckAdmit(ctx, key, a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	lockKey, fenceKey, err := s.keys(norm)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	requireLive := "0"
	if a.RequireLive {
		requireLive = "1"
	}
	legacy, deadlines, fences := s.barrierKeys(lockKey)
	reply, err := s.eval(ctx, admitScript, []string{lockKey, fenceKey, legacy, deadlines, fences},
		a.Fence, requireLive, a.WriteID, maxMs, a.InFlightCap(), backend.BarrierPruneBatch).Slice()
	if err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithKeyLockID(classify(ctx, op, err), key, "")
	}
	res, err := admitReply(norm, a, reply)
	if err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithKeyLockID(err, key, "")
	}
	return res, nil
}

// admitReply turns admitScript's reply into the result, deriving the state
// exactly as Inspect does.
func admitReply(nk string, a lockstore.WriteAdmission, reply []any) (lockstore.WriteAdmitResult, error) {
	const op = "admit"
	if len(reply) != 6 {
		return lockstore.WriteAdmitResult{}, badReply(op, fmt.Errorf("reply has %d fields, want 6", len(reply)))
	}
	status, err := replyInt(reply, 3)
	if err != nil {
		return lockstore.WriteAdmitResult{}, badReply(op, err)
	}
	switch status {
	case admitCorruptLock:
		return lockstore.WriteAdmitResult{}, lockstore.Errorf(lockstore.Internal, op, "the lock key holds a value that is not a lock")
	case admitBadFence:
		return lockstore.WriteAdmitResult{}, lockstore.Errorf(lockstore.Internal, op, "the fence counter holds a value that is not a non-negative integer")
	case admitBadEntry:
		return lockstore.WriteAdmitResult{}, lockstore.Errorf(lockstore.Internal, op, "the legacy write barrier hash holds an entry that is not <fence>:<deadlineMs>")
	}
	held, now, err := liveLock(reply, 0, 2)
	if err != nil {
		return lockstore.WriteAdmitResult{}, badReply(op, err)
	}
	ks := lockstore.KeyState{NowMs: now}
	if c, ok := reply[1].(string); ok {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			return lockstore.WriteAdmitResult{}, badReply(op, fmt.Errorf("fence counter is not an integer"))
		}
		if n > 0 {
			if ks.LatestFence, err = lockstore.FormatFence(n); err != nil {
				return lockstore.WriteAdmitResult{}, badReply(op, err)
			}
		}
	}
	if held != nil {
		ks.Live = &lockstore.Lock{Key: nk, LockID: held.LockID, Fence: held.Fence,
			ExpiresAtMs: held.ExpiresAtMs, AcquiredAtMs: held.AcquiredAtMs}
		if lockstore.ValidFence(held.Fence) && ks.LatestFence < held.Fence {
			ks.LatestFence = held.Fence
		}
	}
	blocking, err1 := replyInt(reply, 4)
	until, err2 := replyInt(reply, 5)
	if err1 != nil || err2 != nil {
		return lockstore.WriteAdmitResult{}, badReply(op, fmt.Errorf("fields: %v %v", err1, err2))
	}
	res := lockstore.WriteAdmitResult{State: ks}
	switch status {
	case admitAdmitted:
		res.Admitted = true
	case admitBlocked:
		res.Blocking, res.BlockedUntilMs = int(blocking), until
	case admitFull:
		res.Full = true
	case admitNoMatch:
	default:
		return lockstore.WriteAdmitResult{}, badReply(op, fmt.Errorf("status %d", status))
	}
	// The script and Go must agree on the match; if they ever do not, the
	// decision cannot be trusted (an admitted write is left to expire).
	if matched := status != admitNoMatch; matched != backend.AdmissionMatches(a, ks) {
		return lockstore.WriteAdmitResult{}, lockstore.Errorf(lockstore.Internal, op,
			"script and store disagree whether fence %s matches (script %v)", a.Fence, matched)
	}
	return res, nil
}

// Finish removes the entry with one script (finishScript); an absent entry
// is not an error. Expired entries are left to the next Admit or the keys'
// own expiry.
func (s *Store) Finish(ctx context.Context, key, writeID string) error {
	const op = "finish"
	norm, err := backend.PrecheckFinish(ctx, key, writeID)
	if err != nil {
		return err
	}
	lockKey, _, err := s.keys(norm)
	if err != nil {
		return err
	}
	legacy, deadlines, fences := s.barrierKeys(lockKey)
	if err := s.eval(ctx, finishScript, []string{legacy, deadlines, fences}, writeID).Err(); err != nil {
		return lockstore.WithKeyLockID(classify(ctx, op, err), key, "")
	}
	return nil
}

var _ lockstore.BarrierSweeper = (*Store)(nil)

// SweepBarrier has nothing to do on Redis and reports 0: every key of
// barrier entries carries a PEXPIRE past its latest deadline, so Redis itself removes
// a key's entries once they have all expired. It exists so that callers
// can treat every backend alike.
func (s *Store) SweepBarrier(ctx context.Context, limit int) (int, error) {
	if err := backend.ValidateSweepLimit(limit); err != nil {
		return 0, err
	}
	if err := lockstore.ContextError(ctx, "sweep"); err != nil {
		return 0, err
	}
	return 0, nil
}
