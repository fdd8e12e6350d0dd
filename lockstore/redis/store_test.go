package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// testURL returns REDIS_URL or fails: these tests need a real server.
func testURL(tb testing.TB) string {
	tb.Helper()
	return testutil.RedisURL(tb)
}

// openPrefix opens a store on REDIS_URL with prefix and deletes the
// prefix's keys when the test ends.
func openPrefix(tb testing.TB, prefix string, mod ...func(*Config)) *Store {
	tb.Helper()
	return openOn(tb, testURL(tb), prefix, mod...)
}

// openOn opens a store on the store URL raw with prefix; mod adjusts the
// config first.
func openOn(tb testing.TB, raw, prefix string, mod ...func(*Config)) *Store {
	tb.Helper()
	cfg, err := ParseURL(raw)
	if err != nil {
		tb.Fatalf("ParseURL: %v", err)
	}
	cfg.Prefix = prefix
	cfg.Logger = slog.New(slog.NewTextHandler(tb.Output(), nil))
	for _, m := range mod {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// dropPrefix deletes every key under prefix (test hygiene on a shared
// server; fencegate itself never deletes fence counters).
func dropPrefix(tb testing.TB, c *goredis.Client, prefix string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	for _, pattern := range []string{prefix + ":*", prefix + ownKeyInfix + "*"} {
		iter := c.Scan(ctx, 0, pattern, 500).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			tb.Logf("cleanup scan of %s: %v", prefix, err)
			return
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
			tb.Logf("cleanup of %s: %v", prefix, err)
			return
		}
		keys = keys[n:]
	}
}

func TestConformance(t *testing.T) {
	testURL(t)
	storetest.Run(t, conformanceHarness(openPrefix, "syncguard_test_", nil))
	// Every namespace the suite used is left behind on purpose by the suite's
	// reopen cases; drop them now that it is done.
	s := openPrefix(t, "syncguard_test_cleanup")
	dropPrefix(t, s.Client(), "syncguard_test_t*")
}

// conformanceHarness is the suite's harness over open: namespace ns is
// prefix+ns, and layout (if not nil) adjusts each store's config.
func conformanceHarness(open func(tb testing.TB, prefix string, mod ...func(*Config)) *Store, prefix string, layout func(*Config)) storetest.Harness {
	return storetest.Harness{
		Open: func(t *testing.T, ns string, o storetest.Options) (lockstore.Store, error) {
			if o.Needs(storetest.SweepCounts) {
				return nil, fmt.Errorf("%w: barrier entries leave by PEXPIRE; SweepBarrier is a no-op", storetest.ErrNotSupported)
			}
			return open(t, prefix+ns, func(c *Config) {
				if layout != nil {
					layout(c)
				}
				c.FenceFloor, c.AuditRetention = o.FenceFloor, o.AuditRetention
			}), nil
		},
		SetFence: func(t *testing.T, st lockstore.Store, ns, key string, n int64) {
			s := st.(*Store)
			fk, err := s.FenceKey(key)
			if err != nil {
				t.Fatalf("FenceKey: %v", err)
			}
			if err := s.Universal().Set(context.Background(), fk, n, 0).Err(); err != nil {
				t.Fatalf("SET %s: %v", fk, err)
			}
		},
	}
}

// TestLayout: acquire("resource:123") with the default prefix writes exactly
// SyncGuard's three keys, with SyncGuard's value shapes and TTLs.
func TestLayout(t *testing.T) {
	s := openPrefix(t, "")
	ctx := context.Background()
	c := s.Client()
	const key = "resource:123"
	const lockKey = "syncguard:resource:123"
	const fenceKey = "syncguard:fence:syncguard:resource:123"
	if got, _ := s.LockKey(key); got != lockKey {
		t.Fatalf("LockKey = %q, want %q", got, lockKey)
	}
	if got, _ := s.FenceKey(key); got != fenceKey {
		t.Fatalf("FenceKey = %q, want %q", got, fenceKey)
	}
	// Another run (or a SyncGuard client) may hold it; wait it out briefly.
	if held, _ := c.Exists(ctx, lockKey).Result(); held != 0 {
		t.Fatalf("%s is already held on this server; is another test using the default prefix?", lockKey)
	}
	before, _ := c.Get(ctx, fenceKey).Int64()
	touched := func() []string {
		var keys []string
		iter := c.Scan(ctx, 0, "*resource:123*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		sort.Strings(keys)
		return keys
	}

	r, err := s.Acquire(ctx, key, 30*time.Second)
	if err != nil || !r.OK {
		t.Fatalf("Acquire = %+v, %v", r, err)
	}
	defer s.Release(ctx, r.LockID)
	idKey := "syncguard:id:" + r.LockID

	if got, want := strings.Join(touched(), " "), fenceKey+" "+lockKey; got != want {
		t.Errorf("keys naming resource:123 = %q, want %q", got, want)
	}
	if got := c.Get(ctx, idKey).Val(); got != lockKey {
		t.Errorf("GET %s = %q, want the full lock key %q (docs/design.md, \"Storage keys\")", idKey, got, lockKey)
	}
	// The counter holds the fence issued, an integer SyncGuard's INCR
	// continues from: the clock floor's, or one more than before.
	got, _ := c.Get(ctx, fenceKey).Int64()
	if want, _ := lockstore.FormatFence(got); got <= before || r.Fence != want {
		t.Errorf("counter = %d (before: %d), fence %q; want the fence written back, above the old counter", got, before, r.Fence)
	}

	raw := c.Get(ctx, lockKey).Val()
	var v map[string]any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatalf("lock value %q: %v", raw, err)
	}
	var fields []string
	for f := range v {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	if got := strings.Join(fields, ","); got != "acquiredAtMs,expiresAtMs,fence,key,lockId" {
		t.Errorf("lock value fields = %s", got)
	}
	if v["lockId"] != r.LockID || v["key"] != key || v["fence"] != r.Fence || int64(v["expiresAtMs"].(float64)) != r.ExpiresAtMs {
		t.Errorf("lock value = %s, want lockId/key/fence/expiresAtMs of %+v", raw, r)
	}
	if acq := int64(v["acquiredAtMs"].(float64)); r.ExpiresAtMs-acq != 30000 {
		t.Errorf("expiresAtMs-acquiredAtMs = %d, want 30000", r.ExpiresAtMs-acq)
	}
	for _, k := range []string{lockKey, idKey} {
		pttl := c.PTTL(ctx, k).Val()
		if pttl < 30*time.Second || pttl > 31*time.Second {
			t.Errorf("PTTL %s = %v, want ttl+tolerance ≈ 31s", k, pttl)
		}
	}
	if ttl := c.PTTL(ctx, fenceKey).Val(); ttl != -1 {
		t.Errorf("PTTL of the fence counter = %v, want no expiry", ttl)
	}

	rel, err := s.Release(ctx, r.LockID)
	if err != nil || !rel.OK {
		t.Fatalf("Release = %+v, %v", rel, err)
	}
	if n := c.Exists(ctx, lockKey, idKey).Val(); n != 0 {
		t.Errorf("%d of lock/index keys remain after release", n)
	}
	if n := c.Exists(ctx, fenceKey).Val(); n != 1 {
		t.Error("release deleted the fence counter")
	}
}

// TestTruncation (docs/design.md, "Storage keys"): with a prefix long enough to hash every storage
// key, release, extend and both lookups still reach the lock, because the
// index stores the full (hashed) lock key.
func TestTruncation(t *testing.T) {
	prefix := "syncguard_test_trunc_" + strings.Repeat("p", 480)
	// Consecutive fences: two fresh keys' first fences are equal exactly
	// when their counters are distinct.
	s := openPrefix(t, prefix, func(c *Config) { c.FenceFloor = backend.FloorOff })
	t.Cleanup(func() { dropPrefix(t, s.Client(), prefix) })
	ctx := context.Background()
	c := s.Client()
	key := strings.Repeat("k", 511) + "1"
	other := strings.Repeat("k", 511) + "2"

	lockKey, _ := s.LockKey(key)
	fenceKey, _ := s.FenceKey(key)
	if len(lockKey) != len(prefix)+1+22 || !strings.HasPrefix(lockKey, prefix+":") {
		t.Fatalf("lock key %q… is not hashed", lockKey[:min(len(lockKey), 40)])
	}
	if len(fenceKey) != len(prefix)+1+22 || fenceKey == lockKey {
		t.Fatalf("fence key is not a distinct hashed key")
	}

	r, err := s.Acquire(ctx, key, 10*time.Second)
	if err != nil || !r.OK {
		t.Fatalf("Acquire = %+v, %v", r, err)
	}
	idKey, _ := s.IndexKey(r.LockID)
	if got := c.Get(ctx, idKey).Val(); got != lockKey {
		t.Fatalf("index holds %q…, want the hashed lock key", got[:min(len(got), 40)])
	}
	if r2, err := s.Acquire(ctx, other, 10*time.Second); err != nil || !r2.OK || r2.Fence != r.Fence {
		t.Fatalf("Acquire(other long key) = %+v, %v; want its own lock and counter", r2, err)
	}
	if li, err := s.LookupLockID(ctx, r.LockID); err != nil || li == nil || li.KeyHash != lockstore.HashKey(key) {
		t.Fatalf("LookupLockID = %+v, %v", li, err)
	}
	e, err := s.Extend(ctx, r.LockID, 20*time.Second)
	if err != nil || !e.OK {
		t.Fatalf("Extend = %+v, %v", e, err)
	}
	if li, _ := s.LookupKey(ctx, key); li == nil || li.ExpiresAtMs != e.ExpiresAtMs {
		t.Fatalf("LookupKey after Extend = %+v, want expiresAtMs %d", li, e.ExpiresAtMs)
	}
	rel, err := s.Release(ctx, r.LockID)
	if err != nil || !rel.OK {
		t.Fatalf("Release = %+v, %v", rel, err)
	}
	if locked, _ := s.IsLocked(ctx, key); locked {
		t.Fatal("still locked after Release")
	}
	if locked, _ := s.IsLocked(ctx, other); !locked {
		t.Fatal("releasing one long key released the other")
	}
}

// TestReservedKeys: user keys that would land on an index or a counter are
// refused before any I/O, as input errors; "audit" is an ordinary key.
func TestReservedKeys(t *testing.T) {
	s := openPrefix(t, "syncguard_test_reserved")
	ctx := context.Background()
	for _, k := range []string{"id:AAAAAAAAAAAAAAAAAAAAAA", "id:", "fence:syncguard_test_reserved:x", "fence:"} {
		if _, err := s.Acquire(ctx, k, time.Second); lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("Acquire(%q) error = %v, want InvalidArgument", k, err)
		}
		if _, err := s.Inspect(ctx, k); lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("Inspect(%q) error = %v, want InvalidArgument", k, err)
		}
	}
	for _, k := range []string{"ids", "my-id:1", "fences:1", "audit", "audit:2024", "auditor"} {
		r, err := s.Acquire(ctx, k, time.Second)
		if err != nil || !r.OK {
			t.Errorf("Acquire(%q) = %+v, %v; want an ordinary lock", k, r, err)
			continue
		}
		s.Release(ctx, r.LockID)
	}
	dropPrefix(t, s.Client(), s.Prefix())
}

// TestForeignValues: the scripts never overwrite a key that does not hold a
// lock, and read locks SyncGuard's cjson writes (other field order, escaped
// slashes).
func TestForeignValues(t *testing.T) {
	s := openPrefix(t, "syncguard_test_foreign")
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	ctx := context.Background()
	c := s.Client()

	lk, _ := s.LockKey("corrupt")
	c.Set(ctx, lk, "5", time.Minute)
	if _, err := s.Acquire(ctx, "corrupt", time.Second); lockstore.CodeOf(err) != lockstore.Internal {
		t.Errorf("Acquire over a non-lock value: %v, want Internal", err)
	}
	if got := c.Get(ctx, lk).Val(); got != "5" {
		t.Errorf("value was overwritten with %q", got)
	}

	fk, _ := s.FenceKey("badcounter")
	c.Set(ctx, fk, "not-a-number", time.Minute)
	if _, err := s.Acquire(ctx, "badcounter", time.Second); lockstore.CodeOf(err) != lockstore.Internal {
		t.Errorf("Acquire with a corrupt counter: %v, want Internal", err)
	}
	if n := c.Exists(ctx, mustKey(t, s.LockKey, "badcounter")).Val(); n != 0 {
		t.Error("Acquire with a corrupt counter wrote the lock")
	}

	// A lock as SyncGuard's cjson.encode writes it.
	now := time.Now().UnixMilli()
	const id = "SyncGuardWroteThis0123"
	lk, _ = s.LockKey("a/b")
	sg := fmt.Sprintf(`{"fence":"000000000000007","key":"a\/b","acquiredAtMs":%d,"lockId":"%s","expiresAtMs":%d}`, now, id, now+20000)
	c.Set(ctx, lk, sg, 20*time.Second)
	c.Set(ctx, mustKey(t, s.IndexKey, id), lk, 20*time.Second)
	li, err := s.LookupLockID(ctx, id)
	if err != nil || li == nil || li.Fence != "000000000000007" || li.KeyHash != lockstore.HashKey("a/b") {
		t.Fatalf("LookupLockID of a SyncGuard lock = %+v, %v", li, err)
	}
	e, err := s.Extend(ctx, id, 5*time.Second)
	if err != nil || !e.OK {
		t.Fatalf("Extend of a SyncGuard lock = %+v, %v", e, err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(c.Get(ctx, lk).Val()), &v); err != nil || v["key"] != "a/b" || v["fence"] != "000000000000007" || int64(v["acquiredAtMs"].(float64)) != now {
		t.Errorf("extended value = %v (%v); key, fence and acquiredAtMs must survive", v, err)
	}
	if r, err := s.Release(ctx, id); err != nil || !r.OK {
		t.Fatalf("Release of a SyncGuard lock = %+v, %v", r, err)
	}
}

func mustKey(t *testing.T, f func(string) (string, error), arg string) string {
	t.Helper()
	k, err := f(arg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestIsLockedCleanup: off by default; when on, only locks more than 2000 ms
// past expiry are deleted (with their index), never a counter, and never one
// the liveness tolerance or the guard still covers.
func TestIsLockedCleanup(t *testing.T) {
	plain := openPrefix(t, "syncguard_test_cleanup_on")
	cleaning := openPrefix(t, "syncguard_test_cleanup_on", func(c *Config) { c.CleanupInIsLocked = true })
	t.Cleanup(func() { dropPrefix(t, plain.Client(), plain.Prefix()) })
	ctx := context.Background()
	c := plain.Client()

	// Values written without a TTL (as a foreign writer might), expired by
	// the given amount; only the server clock matters, so read it.
	tm, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	now := tm.UnixMilli()
	plant := func(key, id string, expiredBy int64) (string, string) {
		lk := mustKey(t, plain.LockKey, key)
		ik := mustKey(t, plain.IndexKey, id)
		v := fmt.Sprintf(`{"lockId":"%s","expiresAtMs":%d,"acquiredAtMs":%d,"key":"%s","fence":"000000000000001"}`, id, now-expiredBy, now-60000, key)
		c.Set(ctx, lk, v, 0)
		c.Set(ctx, ik, lk, 0)
		c.Set(ctx, mustKey(t, plain.FenceKey, key), 1, 0)
		return lk, ik
	}
	oldLK, oldIK := plant("old", "OldLockOldLockOldLock0", 10000)
	tolLK, _ := plant("tolerance", "TolLockTolLockTolLock0", 500)
	guardLK, _ := plant("guarded", "GrdLockGrdLockGrdLock0", 1500)

	if locked, err := plain.IsLocked(ctx, "old"); err != nil || locked {
		t.Fatalf("IsLocked(old) = %v, %v", locked, err)
	}
	if c.Exists(ctx, oldLK).Val() != 1 {
		t.Fatal("IsLocked deleted a lock with cleanup off")
	}
	if locked, err := cleaning.IsLocked(ctx, "old"); err != nil || locked {
		t.Fatalf("IsLocked(old) with cleanup = %v, %v", locked, err)
	}
	if n := c.Exists(ctx, oldLK, oldIK).Val(); n != 0 {
		t.Errorf("cleanup left %d of the expired lock's keys", n)
	}
	if c.Exists(ctx, mustKey(t, plain.FenceKey, "old")).Val() != 1 {
		t.Error("cleanup deleted a fence counter")
	}
	if locked, _ := cleaning.IsLocked(ctx, "tolerance"); !locked {
		t.Error("IsLocked(tolerance) = false; 500 ms past expiry is within the tolerance")
	}
	if locked, _ := cleaning.IsLocked(ctx, "guarded"); locked {
		t.Error("IsLocked(guarded) = true; 1500 ms past expiry is not live")
	}
	if c.Exists(ctx, tolLK, guardLK).Val() != 2 {
		t.Error("cleanup deleted a lock within its 2000 ms guard")
	}
}

// TestAudit: events round-trip, filters apply, newest first, and the stream
// is trimmed by count and by age.
func TestAudit(t *testing.T) {
	prefix := "syncguard_test_audit"
	s := openPrefix(t, prefix, func(c *Config) { c.AuditRetention = lockstore.AuditRetention{MaxEvents: 150, MaxAge: time.Hour} })
	t.Cleanup(func() { dropPrefix(t, s.Client(), prefix) })
	ctx := context.Background()
	c := s.Client()
	if got := s.audit[0][0]; got != prefix+".fencegate:audit" {
		t.Fatalf("audit stream = %q", got)
	}

	base := time.Now().UnixMilli()
	var evs []lockstore.AuditEvent
	for i := range 1000 {
		k := fmt.Sprintf("k%d", i%2)
		evs = append(evs, lockstore.AuditEvent{TimeMs: base + int64(i), DecisionID: fmt.Sprint(i), Source: "authz-grpc",
			KeyHash: lockstore.HashKey(k), KeyDigest: lockstore.DigestKey(k).String(), Presented: "000000000000001", Current: "000000000000002", Reason: "stale", Policy: "holder", Mode: "enforce"})
	}
	if err := s.AppendAudit(ctx, evs); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	if n := c.XLen(ctx, s.audit[0][0]).Val(); n < 150 || n > 400 {
		t.Errorf("XLEN after 1000 events with MaxEvents 150 = %d, want about 150 (approximate trimming)", n)
	}

	got, err := s.QueryAudit(ctx, lockstore.AuditQuery{Key: "k1", Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[0].DecisionID != "999" || got[4].DecisionID != "991" {
		t.Fatalf("QueryAudit(k1, 5) = %+v, want decisions 999,997,…,991", ids(got))
	}
	if got[0] != evs[999] {
		t.Errorf("event did not round-trip: %+v != %+v", got[0], evs[999])
	}
	got, _ = s.QueryAudit(ctx, lockstore.AuditQuery{SinceMs: base + 995})
	if len(got) != 5 || got[0].DecisionID != "999" || got[4].DecisionID != "995" {
		t.Errorf("QueryAudit(since) = %v", ids(got))
	}
	got, _ = s.QueryAudit(ctx, lockstore.AuditQuery{Limit: 100000})
	if len(got) > lockstore.MaxAuditLimit || len(got) < 100 {
		t.Errorf("QueryAudit(huge limit) returned %d", len(got))
	}
	if got, _ := s.QueryAudit(ctx, lockstore.AuditQuery{Key: "nobody"}); got == nil || len(got) != 0 {
		t.Errorf("QueryAudit(no match) = %v, want an empty non-nil slice", got)
	}

	// Age: with MaxAge 50 ms, entries older than that go on the next append
	// (whole stream nodes at a time, hence "fewer", not "none").
	aged := openPrefix(t, prefix, func(c *Config) {
		c.AuditRetention = lockstore.AuditRetention{MaxEvents: 100000, MaxAge: 50 * time.Millisecond}
	})
	before := c.XLen(ctx, s.audit[0][0]).Val()
	time.Sleep(150 * time.Millisecond)
	if err := aged.AppendAudit(ctx, evs[:1]); err != nil {
		t.Fatal(err)
	}
	if n := c.XLen(ctx, s.audit[0][0]).Val(); n >= before {
		t.Errorf("XLEN after an append past MaxAge = %d, want fewer than %d", n, before)
	}
}

func ids(evs []lockstore.AuditEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.DecisionID)
	}
	return out
}

// cmdCounter is a go-redis hook recording the commands a store sends.
type cmdCounter struct {
	mu   sync.Mutex
	cmds []string
}

func (h *cmdCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *cmdCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.mu.Lock()
		h.cmds = append(h.cmds, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *cmdCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *cmdCounter) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.cmds
	h.cmds = nil
	return c
}

// TestRoundTrips: every lock operation is exactly one EVALSHA (the scripts
// loaded at Open are hit, never re-sent).
func TestRoundTrips(t *testing.T) {
	s := openPrefix(t, "syncguard_test_roundtrips")
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	ctx := context.Background()
	h := &cmdCounter{}
	s.Client().AddHook(h)

	var lockID string
	steps := []struct {
		name string
		fn   func() error
	}{
		{"Acquire", func() error {
			r, err := s.Acquire(ctx, "rt", time.Minute)
			lockID = r.LockID
			return err
		}},
		{"Extend", func() error { _, err := s.Extend(ctx, lockID, time.Minute); return err }},
		{"IsLocked", func() error { _, err := s.IsLocked(ctx, "rt"); return err }},
		{"LookupKey", func() error { _, err := s.LookupKey(ctx, "rt"); return err }},
		{"LookupLockID", func() error { _, err := s.LookupLockID(ctx, lockID); return err }},
		{"Inspect", func() error { _, err := s.Inspect(ctx, "rt"); return err }},
		{"Release", func() error { _, err := s.Release(ctx, lockID); return err }},
		{"AppendAudit", func() error {
			return s.AppendAudit(ctx, []lockstore.AuditEvent{{TimeMs: 1, KeyHash: "h", Reason: "stale"}})
		}},
	}
	for _, st := range steps {
		if err := st.fn(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := h.take(); len(got) != 1 || got[0] != "evalsha" {
			t.Errorf("%s sent %v, want exactly one evalsha", st.name, got)
		}
	}
}

// TestFenceWarnLog: past FenceWarn the store logs a warning naming the
// key's hash — never the key or the lockId.
func TestFenceWarnLog(t *testing.T) {
	var logs testutil.LogBuffer
	s := openPrefix(t, "syncguard_test_warnlog", func(c *Config) {
		c.Logger = testutil.Logger(&logs, slog.LevelDebug)
		c.FenceFloor = backend.FloorOff // a counter at FenceWarn is far ahead of today's floor
	})
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	ctx := context.Background()
	const key = "customer-4711-secret"
	r := locktest.Acquire(t, s, key, time.Second)
	if strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("warning at fence %s:\n%s", r.Fence, logs.String())
	}
	s.Release(ctx, r.LockID)
	s.Client().Set(ctx, mustKey(t, s.FenceKey, key), lockstore.FenceWarn, 0)
	r = locktest.Acquire(t, s, key, time.Second)
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "keyHash="+lockstore.HashKey(key)) {
		t.Errorf("no warning with the keyHash past FenceWarn:\n%s", out)
	}
	if strings.Contains(out, key) || strings.Contains(out, r.LockID) {
		t.Errorf("logs contain the raw key or lockId:\n%s", out)
	}
}

// TestLongestTTL: the longest TTL a Duration can carry (~292 years) stays
// exact through the scripts (now+ttl is far below 2^53).
func TestLongestTTL(t *testing.T) {
	s := openPrefix(t, "syncguard_test_ttl")
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	ctx := context.Background()
	ttl := time.Duration(math.MaxInt64).Truncate(time.Millisecond)
	before := time.Now().UnixMilli()
	r := locktest.Acquire(t, s, "k", ttl)
	if d := r.ExpiresAtMs - before - ttl.Milliseconds(); d < -1000 || d > 1000 {
		t.Errorf("expiresAtMs is %d ms off now+ttl", d)
	}
	if e, err := s.Extend(ctx, r.LockID, ttl); err != nil || !e.OK {
		t.Errorf("Extend with the longest TTL = %+v, %v", e, err)
	}
	if res, err := s.Release(ctx, r.LockID); err != nil || !res.OK {
		t.Errorf("Release of a lock with the longest TTL = %+v, %v", res, err)
	}
}

// TestAuditKeyCoexists: the audit stream lives under <prefix>.fencegate:,
// so a lock on user key "audit" (at <prefix>:audit, where the stream used to
// be) and auditing work side by side.
func TestAuditKeyCoexists(t *testing.T) {
	prefix := "syncguard_test_auditkey"
	s := openPrefix(t, prefix)
	t.Cleanup(func() { dropPrefix(t, s.Client(), prefix) })
	ctx := context.Background()
	c := s.Client()

	r, err := s.Acquire(ctx, "audit", time.Minute)
	if err != nil || !r.OK {
		t.Fatalf("Acquire(audit) = %+v, %v", r, err)
	}
	ev := lockstore.AuditEvent{TimeMs: time.Now().UnixMilli(), DecisionID: "d1", Source: "authz-http",
		KeyHash: lockstore.HashKey("audit"), KeyDigest: lockstore.DigestKey("audit").String(), Reason: "stale", Policy: "holder", Mode: "enforce"}
	if err := s.AppendAudit(ctx, []lockstore.AuditEvent{ev, {TimeMs: ev.TimeMs, DecisionID: "d2", Source: "authz-http",
		KeyHash: ev.KeyHash, KeyDigest: ev.KeyDigest, Reason: "missing", Policy: "holder", Mode: "enforce"}}); err != nil {
		t.Fatalf("AppendAudit with a lock on key audit: %v", err)
	}
	if typ := c.Type(ctx, prefix+":audit").Val(); typ != "string" {
		t.Errorf("TYPE %s:audit = %q, want the lock's string", prefix, typ)
	}
	for _, k := range []string{prefix + ".fencegate:audit", prefix + ".fencegate:audit:input"} {
		if typ := c.Type(ctx, k).Val(); typ != "stream" {
			t.Errorf("TYPE %s = %q, want stream", k, typ)
		}
	}
	got, err := s.QueryAudit(ctx, lockstore.AuditQuery{Key: "audit"})
	if err != nil || len(got) != 2 {
		t.Fatalf("QueryAudit(audit) = %+v, %v; want both events", got, err)
	}
	st, err := s.Inspect(ctx, "audit")
	if err != nil || st.Live == nil || st.Live.LockID != r.LockID {
		t.Fatalf("Inspect(audit) = %+v, %v; want the live lock", st, err)
	}
	if rel, err := s.Release(ctx, r.LockID); err != nil || !rel.OK {
		t.Fatalf("Release = %+v, %v", rel, err)
	}
	if n := c.XLen(ctx, prefix+".fencegate:audit").Val(); n != 1 {
		t.Errorf("audit stream holds %d entries after the release, want 1", n)
	}
}

// TestAuditStreamMove: Open renames a stream at the old <prefix>:audit to
// <prefix>.fencegate:audit once, and leaves the old key alone when it is not
// a stream (a SyncGuard lock on user key "audit") or when the new stream
// already exists.
func TestAuditStreamMove(t *testing.T) {
	ctx := context.Background()
	oldEntry := func(c *goredis.Client, key, id string) {
		t.Helper()
		doc := fmt.Sprintf(`{"timeMs":%d,"decisionId":%q,"source":"authz-grpc","keyHash":"h","reason":"stale","policy":"holder","mode":"enforce"}`,
			time.Now().UnixMilli(), id)
		if err := c.XAdd(ctx, &goredis.XAddArgs{Stream: key, Values: []string{"keyHash", "h", "event", doc}}).Err(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("moved", func(t *testing.T) {
		prefix := "syncguard_test_move1"
		s := openPrefix(t, prefix)
		t.Cleanup(func() { dropPrefix(t, s.Client(), prefix) })
		c := s.Client()
		oldEntry(c, prefix+":audit", "old-1")
		s2 := openPrefix(t, prefix)
		if n := c.Exists(ctx, prefix+":audit").Val(); n != 0 {
			t.Error("the old stream is still there after Open")
		}
		got, err := s2.QueryAudit(ctx, lockstore.AuditQuery{})
		if err != nil || len(got) != 1 || got[0].DecisionID != "old-1" {
			t.Fatalf("QueryAudit after the move = %+v, %v; want the old event", got, err)
		}
		// Now the key "audit" is an ordinary lock.
		if r, err := s2.Acquire(ctx, "audit", time.Second); err != nil || !r.OK {
			t.Fatalf("Acquire(audit) after the move = %+v, %v", r, err)
		}
	})

	t.Run("lock-stays", func(t *testing.T) {
		prefix := "syncguard_test_move2"
		s := openPrefix(t, prefix)
		t.Cleanup(func() { dropPrefix(t, s.Client(), prefix) })
		r, err := s.Acquire(ctx, "audit", time.Minute)
		if err != nil || !r.OK {
			t.Fatalf("Acquire(audit) = %+v, %v", r, err)
		}
		s2 := openPrefix(t, prefix)
		if st, err := s2.Inspect(ctx, "audit"); err != nil || st.Live == nil || st.Live.LockID != r.LockID {
			t.Fatalf("Inspect(audit) after reopen = %+v, %v; want the lock untouched", st, err)
		}
		if n := s.Client().Exists(ctx, s.audit[0][0]).Val(); n != 0 {
			t.Error("Open made an audit stream out of a lock")
		}
	})

	t.Run("both-exist", func(t *testing.T) {
		prefix := "syncguard_test_move3"
		s := openPrefix(t, prefix)
		t.Cleanup(func() { dropPrefix(t, s.Client(), prefix) })
		c := s.Client()
		oldEntry(c, prefix+":audit", "old-1")
		oldEntry(c, s.audit[0][0], "new-1")
		s2 := openPrefix(t, prefix)
		if n := c.XLen(ctx, prefix+":audit").Val(); n != 1 {
			t.Errorf("old stream has %d entries, want it left in place with 1", n)
		}
		got, err := s2.QueryAudit(ctx, lockstore.AuditQuery{})
		if err != nil || len(got) != 1 || got[0].DecisionID != "new-1" {
			t.Fatalf("QueryAudit = %+v, %v; want only the new stream's event", got, err)
		}
	})
}
