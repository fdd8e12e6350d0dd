package redis

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// legacyAdmitScript is the admit script of the versions that kept every
// entry in one hash and walked it all on each Admit (verbatim, up to its
// name). It plays an older gateway of a fleet mid-rollout, and the broken
// variant the cost test must catch.
//
// KEYS: lockKey, fenceKey, writesKey
// ARGV: fence, requireLive ("1"|"0"), writeId, maxWriteMs
var legacyAdmitScript = newScript(`
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

// legacyAdmit runs legacyAdmitScript for key as an older gateway would, and
// reports the script's status (1 admitted, 0 no match, 2 blocked).
func legacyAdmit(t *testing.T, s *Store, key, fence, id string, maxWrite time.Duration) int64 {
	t.Helper()
	norm, _ := lockstore.NormalizeKey(key)
	lockKey, fenceKey, err := s.keys(norm)
	if err != nil {
		t.Fatal(err)
	}
	legacy, _, _ := s.barrierKeys(lockKey)
	reply, err := legacyAdmitScript.Run(context.Background(), s.Client(), []string{lockKey, fenceKey, legacy},
		fence, "1", id, maxWrite.Milliseconds()).Slice()
	if err != nil {
		t.Fatalf("legacy admit: %v", err)
	}
	return reply[3].(int64)
}

func newID(t *testing.T) string {
	t.Helper()
	id, err := lockstore.NewLockID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func admitID(t *testing.T, s *Store, key, fence, id string, maxWrite time.Duration) lockstore.WriteAdmitResult {
	t.Helper()
	r, err := s.Admit(context.Background(), key, lockstore.WriteAdmission{Fence: fence, RequireLive: true, WriteID: id, MaxWrite: maxWrite})
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	return r
}

// TestBarrierMixedFleet: during a rolling upgrade, gateways of this version
// and older ones (which keep entries in the legacy hash and walk it) see
// each other's writes in flight, in both directions.
func TestBarrierMixedFleet(t *testing.T) {
	s := openPrefix(t, "syncguard_test_barrier_mixed", func(c *Config) { c.FenceFloor = backend.FloorOff })
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	ctx := context.Background()

	t.Run("older gateway's write blocks here", func(t *testing.T) {
		a := locktest.Acquire(t, s, "old-first", time.Minute)
		if st := legacyAdmit(t, s, "old-first", a.Fence, newID(t), time.Minute); st != admitAdmitted {
			t.Fatalf("older gateway's admit = %d, want admitted", st)
		}
		locktest.Release(t, s, a.LockID)
		b := locktest.Acquire(t, s, "old-first", time.Minute)
		if r := admitID(t, s, "old-first", b.Fence, newID(t), time.Minute); r.Admitted || r.Blocking != 1 {
			t.Fatalf("Admit(newer fence) beside an older gateway's write = %+v, want blocked by 1", r)
		}
		// Moved into the index: still blocking on the next call.
		if r := admitID(t, s, "old-first", b.Fence, newID(t), time.Minute); r.Admitted || r.Blocking != 1 {
			t.Fatalf("Admit(newer fence) again = %+v, want blocked by 1", r)
		}
	})

	t.Run("this gateway's write blocks an older one", func(t *testing.T) {
		a := locktest.Acquire(t, s, "new-first", time.Minute)
		id := newID(t)
		if r := admitID(t, s, "new-first", a.Fence, id, time.Minute); !r.Admitted {
			t.Fatalf("Admit = %+v", r)
		}
		locktest.Release(t, s, a.LockID)
		b := locktest.Acquire(t, s, "new-first", time.Minute)
		if st := legacyAdmit(t, s, "new-first", b.Fence, newID(t), time.Minute); st != admitBlocked {
			t.Fatalf("older gateway's Admit(newer fence) beside a write admitted here = %d, want blocked", st)
		}
		if err := s.Finish(ctx, "new-first", id); err != nil {
			t.Fatal(err)
		}
		if st := legacyAdmit(t, s, "new-first", b.Fence, newID(t), time.Minute); st != admitAdmitted {
			t.Fatalf("older gateway's Admit(newer fence) after Finish here = %d, want admitted", st)
		}
	})

	t.Run("a large legacy hash moves in batches, refusing meanwhile", func(t *testing.T) {
		const n = 2*backend.BarrierPruneBatch + 100
		a := locktest.Acquire(t, s, "old-many", time.Minute)
		for range n {
			if st := legacyAdmit(t, s, "old-many", a.Fence, newID(t), time.Minute); st != admitAdmitted {
				t.Fatalf("older gateway's admit = %d", st)
			}
		}
		var admitted int
		for i := range 3 {
			r := admitID(t, s, "old-many", a.Fence, newID(t), time.Minute)
			if r.Admitted {
				admitted = i + 1
				break
			}
			if r.Blocking <= 0 || r.BlockedUntilMs <= r.State.NowMs {
				t.Fatalf("Admit #%d while legacy entries remain = %+v, want blocked with a deadline", i+1, r)
			}
		}
		if admitted != 3 {
			t.Fatalf("Admit under the same fence was admitted at attempt %d, want 3 (after ceil(%d/%d) batches moved)", admitted, n, backend.BarrierPruneBatch)
		}
		locktest.Release(t, s, a.LockID)
		b := locktest.Acquire(t, s, "old-many", time.Minute)
		if r := admitID(t, s, "old-many", b.Fence, newID(t), time.Minute); r.Admitted || r.Blocking != n+1 {
			t.Fatalf("Admit(newer fence) = %+v, want blocked by the %d moved entries and the one admitted", r, n+1)
		}
	})
}

// stats are Redis's INFO commandstats: calls and microseconds per command.
type stats map[string][2]int64

func commandStats(t *testing.T, c *goredis.Client) stats {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := stats{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(k, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var calls, usec int64
		for _, kv := range strings.Split(v, ",") {
			if x, ok := strings.CutPrefix(kv, "calls="); ok {
				calls, _ = strconv.ParseInt(x, 10, 64)
			}
			if x, ok := strings.CutPrefix(kv, "usec="); ok {
				usec, _ = strconv.ParseInt(x, 10, 64)
			}
		}
		out[name] = [2]int64{calls, usec}
	}
	return out
}

// cost runs fn n times and returns Redis's microseconds per script call
// and the commands the scripts ran inside Redis per call.
func cost(t *testing.T, c *goredis.Client, n int, fn func()) (usecPerCall float64, innerPerCall float64) {
	t.Helper()
	before := commandStats(t, c)
	for range n {
		fn()
	}
	after := commandStats(t, c)
	var scripts, usec, inner int64
	for name, a := range after {
		b := before[name]
		switch name {
		case "evalsha", "eval":
			scripts += a[0] - b[0]
			usec += a[1] - b[1]
		case "info", "ping", "client|setinfo", "hello":
		default:
			inner += a[0] - b[0]
		}
	}
	if scripts == 0 {
		t.Fatal("no script ran")
	}
	return float64(usec) / float64(scripts), float64(inner) / float64(scripts)
}

// pile registers n abandoned, unexpired writes under fence on key: in the
// index (layout "index") or in the legacy hash (layout "legacy", as older
// gateways keep them), written directly in batches for speed.
func pile(t *testing.T, s *Store, key, fence string, n int, layout string) {
	t.Helper()
	ctx := context.Background()
	norm, _ := lockstore.NormalizeKey(key)
	lockKey, _, err := s.keys(norm)
	if err != nil {
		t.Fatal(err)
	}
	legacy, deadlines, fences := s.barrierKeys(lockKey)
	deadline := time.Now().Add(10 * time.Minute).UnixMilli()
	for done := 0; done < n; {
		m := min(1000, n-done)
		p := s.Client().Pipeline()
		var zd, zf []goredis.Z
		hv := make([]any, 0, 2*m)
		for range m {
			id := newID(t)
			zd = append(zd, goredis.Z{Score: float64(deadline), Member: id})
			fn, _ := lockstore.ParseFence(fence)
			zf = append(zf, goredis.Z{Score: float64(fn), Member: id})
			hv = append(hv, id, fmt.Sprintf("%s:%d", fence, deadline))
		}
		if layout == "index" {
			p.ZAdd(ctx, deadlines, zd...)
			p.ZAdd(ctx, fences, zf...)
		} else {
			p.HSet(ctx, legacy, hv...)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		done += m
	}
	for _, k := range []string{legacy, deadlines, fences} {
		s.Client().PExpire(ctx, k, 11*time.Minute)
	}
}

// TestBarrierAdmitCostFlat: with thousands of abandoned, unexpired writes
// piled on one key (an abusive client that knows the key's fence), an Admit
// on that key (same fence: refused Full; newer fence: blocked) and on an
// unrelated key costs Redis about what it costs on an empty key, and runs
// the same number of commands inside Redis. The legacy walk over the same
// pile is measured too and must fail the bound (the test can catch it).
//
// FENCEGATE_BARRIER_COST_SIZES (e.g. "0,2000,50000") logs the figures for
// those pile sizes, this version against the legacy walk.
func TestBarrierAdmitCostFlat(t *testing.T) {
	s := openPrefix(t, "syncguard_test_barrier_cost", func(c *Config) { c.FenceFloor = backend.FloorOff })
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	c := s.Client()
	const reps = 200
	measure := func(size int) (empty, sameKey, newer, other, legacyUsec, emptyInner, pileInner float64) {
		key := fmt.Sprintf("cost-%d", size)
		a := locktest.Acquire(t, s, key, time.Hour)
		o := locktest.Acquire(t, s, key+"-other", time.Hour)
		e := locktest.Acquire(t, s, key+"-empty", time.Hour)
		empty, emptyInner = cost(t, c, reps, func() { admitID(t, s, key+"-empty", e.Fence, newID(t), time.Minute) })
		pile(t, s, key, a.Fence, size, "index")
		sameKey, pileInner = cost(t, c, reps, func() {
			r := admitID(t, s, key, a.Fence, newID(t), time.Minute)
			if size >= lockstore.DefaultMaxInFlight && (r.Admitted || !r.Full) {
				t.Fatalf("Admit at %d entries = %+v, want Full", size, r)
			}
		})
		other, _ = cost(t, c, reps, func() { admitID(t, s, key+"-other", o.Fence, newID(t), time.Minute) })
		locktest.Release(t, s, a.LockID)
		b := locktest.Acquire(t, s, key, time.Hour)
		newer, _ = cost(t, c, reps, func() {
			if r := admitID(t, s, key, b.Fence, newID(t), time.Minute); size > 0 && (r.Admitted || r.Blocking < size) {
				t.Fatalf("Admit(newer fence) at %d entries = %+v, want blocked", size, r)
			}
		})
		// The legacy walk over a legacy hash of the same size.
		lk := key + "-legacy"
		l := locktest.Acquire(t, s, lk, time.Hour)
		pile(t, s, lk, l.Fence, size, "legacy")
		legacyUsec, _ = cost(t, c, max(5, reps*1000/max(size, 1000)), func() { legacyAdmit(t, s, lk, l.Fence, newID(t), time.Minute) })
		return
	}

	const size = 5000
	empty, sameKey, newer, other, legacyUsec, emptyInner, pileInner := measure(size)
	t.Logf("Redis µs per Admit: empty key %.1f; %d entries: same fence %.1f, newer fence %.1f, unrelated key %.1f; legacy walk %.1f",
		empty, size, sameKey, newer, other, legacyUsec)
	t.Logf("commands inside Redis per Admit: empty key %.1f, %d entries %.1f", emptyInner, size, pileInner)
	// Generous (Redis's own µs include being descheduled on a busy
	// machine): an O(log n) admit at 5,000 entries costs about what an
	// empty one does; the walk costs a hundred times more.
	bound := 10*empty + 500
	for _, m := range []struct {
		what string
		usec float64
	}{{"same fence", sameKey}, {"newer fence", newer}, {"unrelated key", other}} {
		if m.usec > bound {
			t.Errorf("Admit (%s) beside %d entries costs Redis %.1f µs, want at most %.1f (10× the empty key's %.1f + 500)",
				m.what, size, m.usec, bound, empty)
		}
	}
	if legacyUsec <= bound {
		t.Errorf("the legacy walk over %d entries costs %.1f µs, within the bound %.1f: the bound would not catch it", size, legacyUsec, bound)
	}
	if pileInner > 30 {
		t.Errorf("Admit beside %d entries ran %.1f commands inside Redis, want a fixed handful (<= 30)", size, pileInner)
	}

	if env := os.Getenv("FENCEGATE_BARRIER_COST_SIZES"); env != "" {
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 || n > 200000 {
				t.Fatalf("FENCEGATE_BARRIER_COST_SIZES: %q", f)
			}
			empty, sameKey, newer, other, legacyUsec, _, _ := measure(n)
			t.Logf("entries=%d  Redis µs/Admit: empty key %.1f | same key, same fence %.1f | same key, newer fence %.1f | unrelated key %.1f | legacy walk %.1f",
				n, empty, sameKey, newer, other, legacyUsec)
		}
	}
}
