package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fencegate/fencegate/lockstore"
)

// The write barrier's entries of a key live in one hash beside SyncGuard's
// keys, at <prefix>.fencegate:writes:<lock storage key>: field = write id,
// value = "<fence>:<deadlineMs>". The hash carries a PEXPIRE past its
// latest deadline, so a key whose writes all finished or expired leaves
// nothing behind even if no later Admit prunes it.

// Admit script status codes.
const (
	admitAdmitted    = 1
	admitNoMatch     = 0
	admitBlocked     = 2
	admitCorruptLock = -2 // the lock key holds something that is not a lock
	admitBadFence    = -3 // the counter key holds something that is not an integer
	admitBadEntry    = -4 // an entry of the hash is not "<fence>:<deadlineMs>"
)

// admitScript reads the key's state as inspectScript does and applies the
// barrier rule at the same server instant.
//
// KEYS: lockKey, fenceKey, writesKey
// ARGV: fence, requireLive ("1"|"0"), writeId, maxWriteMs
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
local fenceNum = tonumber(fence)
local match
if ARGV[2] == '1' then match = (liveFence == fence) else match = (latest == fence) end

local entries = redis.call('HGETALL', KEYS[3])
local blocking, blockedUntil, lastDeadline = 0, 0, 0
for i = 1, #entries, 2 do
  local v = entries[i + 1]
  local dl = tonumber(string.sub(v, 17))
  if #v < 17 or string.sub(v, 16, 16) ~= ':' or dl == nil or tonumber(string.sub(v, 1, 15)) == nil then
    return {raw, cur, now, -4, 0, 0}
  end
  if dl <= now then
    redis.call('HDEL', KEYS[3], entries[i])
  else
    if dl > lastDeadline then lastDeadline = dl end
    if tonumber(string.sub(v, 1, 15)) < fenceNum then
      blocking = blocking + 1
      if dl > blockedUntil then blockedUntil = dl end
    end
  end
end
if not match then return {raw, cur, now, 0, 0, 0} end
if blocking > 0 then return {raw, cur, now, 2, blocking, blockedUntil} end
local deadline = now + tonumber(ARGV[4])
redis.call('HSET', KEYS[3], ARGV[3], fence .. ':' .. string.format('%d', deadline))
if deadline > lastDeadline then lastDeadline = deadline end
-- Past the last deadline every entry counts as finished; the hash may go.
-- The tolerance is slack between TIME and the expiry clock.
redis.call('PEXPIRE', KEYS[3], lastDeadline - now + 1000)
return {raw, cur, now, 1, 0, 0}
`)

var _ lockstore.WriteBarrier = (*Store)(nil)

// writesKey returns the storage key of the barrier entries of the lock
// stored under lockKey.
func (s *Store) writesKey(lockKey string) string { return s.ownKey("writes:" + lockKey) }

// Admit applies the write barrier in one EVALSHA: the key's state is read
// and the write registered at one server instant, by the server clock.
func (s *Store) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	const op = "admit"
	norm, maxMs, err := lockstore.BeginAdmit(ctx, key, a)
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
	reply, err := s.eval(ctx, admitScript, []string{lockKey, fenceKey, s.writesKey(lockKey)},
		a.Fence, requireLive, a.WriteID, maxMs).Slice()
	if err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithContext(classify(ctx, op, err), key, "")
	}
	res, err := admitReply(a, reply)
	if err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithContext(err, key, "")
	}
	return res, nil
}

// admitReply turns admitScript's reply into the result, deriving the state
// exactly as Inspect does.
func admitReply(a lockstore.WriteAdmission, reply []any) (lockstore.WriteAdmitResult, error) {
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
		return lockstore.WriteAdmitResult{}, lockstore.Errorf(lockstore.Internal, op, "the write barrier hash holds an entry that is not <fence>:<deadlineMs>")
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
		ks.Live = &lockstore.HeldLock{LockID: held.LockID, Fence: held.Fence,
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
	case admitNoMatch:
	default:
		return lockstore.WriteAdmitResult{}, badReply(op, fmt.Errorf("status %d", status))
	}
	// The script and Go must agree on the match; if they ever do not, the
	// decision cannot be trusted (an admitted write is left to expire).
	if matched := status != admitNoMatch; matched != a.Matches(ks) {
		return lockstore.WriteAdmitResult{}, lockstore.Errorf(lockstore.Internal, op,
			"script and store disagree whether fence %s matches (script %v)", a.Fence, matched)
	}
	return res, nil
}

// Finish removes the entry with one HDEL; an absent entry is not an error.
// Expired entries are left to the next Admit or the hash's own expiry.
func (s *Store) Finish(ctx context.Context, key, writeID string) error {
	const op = "finish"
	norm, err := lockstore.BeginFinish(ctx, key, writeID)
	if err != nil {
		return err
	}
	lockKey, _, err := s.keys(norm)
	if err != nil {
		return err
	}
	if err := s.client.HDel(ctx, s.writesKey(lockKey), writeID).Err(); err != nil {
		return lockstore.WithContext(classify(ctx, op, err), key, "")
	}
	return nil
}

var _ lockstore.BarrierSweeper = (*Store)(nil)

// SweepBarrier has nothing to do on Redis and reports 0: every entries
// hash carries a PEXPIRE past its latest deadline, so Redis itself removes
// a key's entries once they have all expired. It exists so that callers
// can treat every backend alike.
func (s *Store) SweepBarrier(ctx context.Context, limit int) (int, error) {
	if err := lockstore.ValidateSweepLimit(limit); err != nil {
		return 0, err
	}
	if err := lockstore.ContextError(ctx, "sweep"); err != nil {
		return 0, err
	}
	return 0, nil
}
