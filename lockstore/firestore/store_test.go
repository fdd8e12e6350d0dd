package firestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

func bg(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rawDoc reads a document's raw fields.
func rawDoc(t testing.TB, ref *firestore.DocumentRef) map[string]any {
	t.Helper()
	snap, err := ref.Get(bg(t))
	if err != nil {
		t.Fatalf("reading %s: %v", ref.ID, err)
	}
	return snap.Data()
}

func docExists(t testing.TB, ref *firestore.DocumentRef) bool {
	t.Helper()
	_, err := ref.Get(bg(t))
	if status.Code(err) == codes.NotFound {
		return false
	}
	if err != nil {
		t.Fatalf("reading %s: %v", ref.ID, err)
	}
	return true
}

// TestStorageLayout pins the SyncGuard-compatible documents byte for byte:
// IDs, field names, value types, 15-digit fences.
func TestStorageLayout(t *testing.T) {
	t.Parallel()
	s := openStore(t, floorOff(nsConfig(t, uniqueNS(t))))
	key := "orders:42"
	r := locktest.Acquire(t, s, key, 10*time.Second)

	lock := rawDoc(t, s.locks.Doc(key))
	want := map[string]any{"lockId": r.LockID, "expiresAtMs": r.ExpiresAtMs, "key": key, "fence": "000000000000001"}
	for f, v := range want {
		if lock[f] != v {
			t.Errorf("lock document field %s = %#v (%T), want %#v (%T)", f, lock[f], lock[f], v, v)
		}
	}
	if acq, ok := lock["acquiredAtMs"].(int64); !ok || acq != r.ExpiresAtMs-10_000 {
		t.Errorf("acquiredAtMs = %#v, want int64 %d", lock["acquiredAtMs"], r.ExpiresAtMs-10_000)
	}
	if len(lock) != 5 {
		t.Errorf("lock document has fields %v, want exactly lockId, expiresAtMs, acquiredAtMs, key, fence", lock)
	}
	ctr := rawDoc(t, s.fences.Doc("fence:"+key))
	if ctr["fence"] != "000000000000001" || ctr["keyDebug"] != key || len(ctr) != 2 {
		t.Errorf("counter document = %v, want {fence: 000000000000001, keyDebug: %s}", ctr, key)
	}

	// Release deletes the lock document, never the counter.
	if rr, err := s.Release(bg(t), r.LockID); err != nil || !rr.OK {
		t.Fatalf("Release = %+v, %v", rr, err)
	}
	if docExists(t, s.locks.Doc(key)) {
		t.Error("lock document survived release")
	}
	if !docExists(t, s.fences.Doc("fence:"+key)) {
		t.Error("release deleted the fence counter")
	}
}

// TestSyncGuardWrittenLock reads a lock written the way SyncGuard's Node
// client writes it (numbers as doubles when they come from JS arithmetic)
// and continues its fence sequence.
func TestSyncGuardWrittenLock(t *testing.T) {
	t.Parallel()
	s := openStore(t, floorOff(nsConfig(t, uniqueNS(t))))
	key := "shared:resource"
	now := time.Now().UnixMilli()
	lockID, _ := lockstore.NewLockID()
	if _, err := s.locks.Doc(key).Set(bg(t), map[string]any{
		"lockId": lockID, "expiresAtMs": float64(now + 30_000), "acquiredAtMs": float64(now),
		"key": key, "fence": "000000000000007",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.fences.Doc("fence:"+key).Set(bg(t), map[string]any{"fence": "000000000000007", "keyDebug": key}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Acquire(bg(t), key, time.Second); err != nil || r.OK || r.Reason != lockstore.ReasonLocked {
		t.Fatalf("Acquire over a SyncGuard-held lock = %+v, %v; want locked", r, err)
	}
	info, err := s.LookupLockID(bg(t), lockID)
	if err != nil || info == nil || info.Fence != "000000000000007" || info.KeyHash != lockstore.HashKey(key) {
		t.Fatalf("LookupLockID = %+v, %v", info, err)
	}
	if rr, err := s.Release(bg(t), lockID); err != nil || !rr.OK {
		t.Fatalf("Release of the SyncGuard lock = %+v, %v", rr, err)
	}
	if r := locktest.Acquire(t, s, key, time.Second); r.Fence != "000000000000008" {
		t.Fatalf("fence after SyncGuard's 7 = %s, want 000000000000008", r.Fence)
	}
}

// TestKeysThatAreNotDocumentIDs covers keys with '/', "." , ".." and the
// reserved __x__ form: they lock, fence and release like any other key.
func TestKeysThatAreNotDocumentIDs(t *testing.T) {
	t.Parallel()
	s := openStore(t, floorOff(nsConfig(t, uniqueNS(t))))
	keys := []string{"a/b", "a/b/c", "/", ".", "..", "__x__", "tenant/orders/42"}
	for _, k := range keys {
		r1 := locktest.Acquire(t, s, k, 10*time.Second)
		if r, err := s.Acquire(bg(t), k, time.Second); err != nil || r.OK {
			t.Fatalf("second Acquire(%q) = %+v, %v; want locked", k, r, err)
		}
		st, err := s.Inspect(bg(t), k)
		if err != nil || st.Live == nil || st.Live.LockID != r1.LockID || st.LatestFence != r1.Fence {
			t.Fatalf("Inspect(%q) = %+v, %v", k, st, err)
		}
		if rr, err := s.Release(bg(t), r1.LockID); err != nil || !rr.OK {
			t.Fatalf("Release(%q) = %+v, %v", k, rr, err)
		}
		if r2 := locktest.Acquire(t, s, k, time.Second); r2.Fence != "000000000000002" {
			t.Fatalf("key %q: second fence %s, want 000000000000002 (each key its own counter)", k, r2.Fence)
		}
	}
	// The 'a/b' lock lives at the hashed ID, nothing lives at the path.
	id, _ := lockDocID("a/b")
	if got := rawDoc(t, s.locks.Doc(id))["key"]; got != "a/b" {
		t.Fatalf("hashed document holds key %v, want a/b", got)
	}
}

// TestClientTimeAuthority drives expiry with an injected clock: no sleeps,
// exact boundaries of the liveness predicate.
func TestClientTimeAuthority(t *testing.T) {
	t.Parallel()
	clk := testutil.NewClock(time.UnixMilli(1_900_000_000_000))
	cfg := floorOff(nsConfig(t, uniqueNS(t)))
	cfg.Now = clk.Now
	s := openStore(t, cfg)

	r := locktest.Acquire(t, s, "k", 10*time.Second)
	if r.ExpiresAtMs != 1_900_000_010_000 {
		t.Fatalf("expiresAtMs = %d, want the injected clock + ttl", r.ExpiresAtMs)
	}
	// Live until expiresAt + tolerance (exclusive).
	clk.Advance(10*time.Second + lockstore.TimeToleranceMs*time.Millisecond - time.Millisecond)
	if locked, err := s.IsLocked(bg(t), "k"); err != nil || !locked {
		t.Fatalf("IsLocked 1ms before the tolerance ends = %v, %v; want true", locked, err)
	}
	if x, err := s.Extend(bg(t), r.LockID, 5*time.Second); err != nil || !x.OK || x.ExpiresAtMs != clk.Now().UnixMilli()+5000 {
		t.Fatalf("Extend = %+v, %v; want OK with now+5s", x, err)
	}
	clk.Advance(5*time.Second + lockstore.TimeToleranceMs*time.Millisecond)
	if locked, err := s.IsLocked(bg(t), "k"); err != nil || locked {
		t.Fatalf("IsLocked at expiresAt+tolerance = %v, %v; want false", locked, err)
	}
	if x, err := s.Extend(bg(t), r.LockID, 5*time.Second); err != nil || x.OK || x.Detail != lockstore.DetailExpired {
		t.Fatalf("Extend of an expired lock = %+v, %v; want OK=false, expired", x, err)
	}
	r2 := locktest.Acquire(t, s, "k", time.Second)
	if r2.Fence != "000000000000002" {
		t.Fatalf("takeover fence = %s, want 000000000000002", r2.Fence)
	}
	if rr, err := s.Release(bg(t), r.LockID); err != nil || rr.OK {
		t.Fatalf("stale Release = %+v, %v; want OK=false", rr, err)
	}
}

// TestDuplicateLockID plants a second document carrying a live lock's
// lockId (as a botched migration would) and checks docs/design.md, "Duplicate lockIds": release and
// extend refuse with OK=false and change nothing live, lookup by lockId
// returns nil, a warning names only hashes, and an expired duplicate is
// deleted by the next mutation's transaction.
func TestDuplicateLockID(t *testing.T) {
	t.Parallel()
	var logs testutil.LogBuffer
	cfg := nsConfig(t, uniqueNS(t))
	cfg.Logger = testutil.Logger(&logs, nil)
	s := openStore(t, cfg)

	key := "dup:resource"
	r := locktest.Acquire(t, s, key, 30*time.Second)
	orig := rawDoc(t, s.locks.Doc(key))
	stray := s.locks.Doc("stray-copy")
	if _, err := stray.Set(bg(t), orig); err != nil {
		t.Fatal(err)
	}

	if rr, err := s.Release(bg(t), r.LockID); err != nil || rr.OK {
		t.Fatalf("Release with a live duplicate = %+v, %v; want OK=false", rr, err)
	}
	if x, err := s.Extend(bg(t), r.LockID, time.Hour); err != nil || x.OK {
		t.Fatalf("Extend with a live duplicate = %+v, %v; want OK=false", x, err)
	}
	if info, err := s.LookupLockID(bg(t), r.LockID); err != nil || info != nil {
		t.Fatalf("LookupLockID with duplicates = %+v, %v; want nil", info, err)
	}
	for _, ref := range []*firestore.DocumentRef{s.locks.Doc(key), stray} {
		got := rawDoc(t, ref)
		if fmt.Sprint(got) != fmt.Sprint(orig) {
			t.Fatalf("%s changed under ambiguity: %v, was %v", ref.ID, got, orig)
		}
	}
	out := logs.String()
	if !strings.Contains(out, "duplicate lock documents") || !strings.Contains(out, lockstore.HashKey(r.LockID)) {
		t.Fatalf("no duplicate warning with the lockId hash in the log:\n%s", out)
	}
	if strings.Contains(out, r.LockID) || strings.Contains(out, key) {
		t.Fatalf("log leaks the raw lockId or key:\n%s", out)
	}

	// Expire the duplicate well past the clean-up guard: the next release
	// still refuses (a live document is among the matches) but deletes the
	// expired one in its transaction, so the release after that succeeds.
	if _, err := stray.Update(bg(t), []firestore.Update{{Path: "expiresAtMs", Value: time.Now().UnixMilli() - 10_000}}); err != nil {
		t.Fatal(err)
	}
	if rr, err := s.Release(bg(t), r.LockID); err != nil || rr.OK {
		t.Fatalf("Release with an expired duplicate = %+v, %v; want OK=false", rr, err)
	}
	if docExists(t, stray) {
		t.Fatal("expired duplicate was not deleted")
	}
	if !docExists(t, s.locks.Doc(key)) {
		t.Fatal("the live lock was deleted while ambiguous")
	}
	if rr, err := s.Release(bg(t), r.LockID); err != nil || !rr.OK {
		t.Fatalf("Release once the duplicate is gone = %+v, %v; want OK", rr, err)
	}
}

// TestStrayLockDocument: a single document carrying a lockId but not at its
// key's document ID holds no lock; mutations refuse and leave it alone.
func TestStrayLockDocument(t *testing.T) {
	t.Parallel()
	s := openStore(t, nsConfig(t, uniqueNS(t)))
	id, _ := lockstore.NewLockID()
	now := time.Now().UnixMilli()
	stray := s.locks.Doc("not-the-key")
	if _, err := stray.Set(bg(t), lockDoc{LockID: id, ExpiresAtMs: now + 60_000, AcquiredAtMs: now, Key: "the-key", Fence: "000000000000003"}); err != nil {
		t.Fatal(err)
	}
	if x, err := s.Extend(bg(t), id, time.Second); err != nil || x.OK {
		t.Fatalf("Extend of a stray document = %+v, %v; want OK=false", x, err)
	}
	if rr, err := s.Release(bg(t), id); err != nil || rr.OK {
		t.Fatalf("Release of a stray document = %+v, %v; want OK=false", rr, err)
	}
	if info, err := s.LookupLockID(bg(t), id); err != nil || info != nil {
		t.Fatalf("LookupLockID of a stray document = %+v, %v; want nil", info, err)
	}
	if !docExists(t, stray) {
		t.Fatal("stray document deleted")
	}
}

// TestOverflowWritesNothing: at FENCE_MAX the acquire fails Internal and
// neither document changes.
func TestOverflowWritesNothing(t *testing.T) {
	t.Parallel()
	s := openStore(t, floorOff(nsConfig(t, uniqueNS(t))))
	setFence(t, s, "k", lockstore.FenceMax-1)
	if r := locktest.Acquire(t, s, "k", time.Millisecond); r.Fence != "900000000000000" {
		t.Fatalf("last fence = %s, want 900000000000000", r.Fence)
	}
	time.Sleep(lockstore.TimeToleranceMs*time.Millisecond + 50*time.Millisecond)
	before := rawDoc(t, s.locks.Doc("k"))
	_, err := s.Acquire(bg(t), "k", time.Second)
	if lockstore.CodeOf(err) != lockstore.Internal || !strings.Contains(err.Error(), "overflow") {
		t.Fatalf("Acquire past FENCE_MAX = %v, want Internal overflow", err)
	}
	if strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("error text carries the raw key: %v", err)
	}
	if got := rawDoc(t, s.fences.Doc("fence:k"))["fence"]; got != "900000000000000" {
		t.Fatalf("counter after overflow = %v, want unchanged", got)
	}
	if got := rawDoc(t, s.locks.Doc("k")); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("lock document changed on overflow: %v, was %v", got, before)
	}
}

// TestMalformedCounterIsNeverReset: a counter that does not hold a 15-digit
// fence stops the acquire instead of restarting the sequence.
func TestMalformedCounterIsNeverReset(t *testing.T) {
	t.Parallel()
	s := openStore(t, nsConfig(t, uniqueNS(t)))
	for _, bad := range []any{"42", 42, "not-a-fence"} {
		if _, err := s.fences.Doc("fence:k").Set(bg(t), map[string]any{"fence": bad}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(bg(t), "k", time.Second); lockstore.CodeOf(err) != lockstore.Internal {
			t.Fatalf("Acquire over counter %#v = %v, want Internal", bad, err)
		}
		if _, err := s.Inspect(bg(t), "k"); lockstore.CodeOf(err) != lockstore.Internal {
			t.Fatalf("Inspect over counter %#v = %v, want Internal", bad, err)
		}
		if got := rawDoc(t, s.fences.Doc("fence:k"))["fence"]; fmt.Sprint(got) != fmt.Sprint(bad) {
			t.Fatalf("counter rewritten to %v", got)
		}
	}
}

// TestInspectLatestFence: Inspect reports the latest fence after the lock
// is gone, and the live holder while it is there.
func TestInspectLatestFence(t *testing.T) {
	t.Parallel()
	s := openStore(t, floorOff(nsConfig(t, uniqueNS(t))))
	st, err := s.Inspect(bg(t), "k")
	if err != nil || st.Live != nil || st.LatestFence != "" || st.NowMs == 0 {
		t.Fatalf("Inspect of a fresh key = %+v, %v", st, err)
	}
	r := locktest.Acquire(t, s, "k", 10*time.Second)
	if _, err := s.Release(bg(t), r.LockID); err != nil {
		t.Fatal(err)
	}
	r2 := locktest.Acquire(t, s, "k", 10*time.Second)
	st, err = s.Inspect(bg(t), "k")
	if err != nil || st.Live == nil || st.Live.LockID != r2.LockID || st.Live.Fence != r2.Fence || st.LatestFence != "000000000000002" {
		t.Fatalf("Inspect = %+v, %v", st, err)
	}
	if _, err := s.Release(bg(t), r2.LockID); err != nil {
		t.Fatal(err)
	}
	st, err = s.Inspect(bg(t), "k")
	if err != nil || st.Live != nil || st.LatestFence != "000000000000002" {
		t.Fatalf("Inspect after release = %+v, %v", st, err)
	}
}

// TestContextErrors: a cancelled context is Aborted and an expired one
// NetworkTimeout, before and during I/O.
func TestContextErrors(t *testing.T) {
	t.Parallel()
	s := openStore(t, nsConfig(t, uniqueNS(t)))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	id, _ := lockstore.NewLockID()
	for _, c := range []struct {
		ctx  context.Context
		want lockstore.Code
	}{{cancelled, lockstore.Aborted}, {expired, lockstore.NetworkTimeout}} {
		ops := map[string]func() error{
			"acquire": func() error { _, err := s.Acquire(c.ctx, "k", time.Second); return err },
			"release": func() error { _, err := s.Release(c.ctx, id); return err },
			"extend":  func() error { _, err := s.Extend(c.ctx, id, time.Second); return err },
			"lookup":  func() error { _, err := s.LookupLockID(c.ctx, id); return err },
			"inspect": func() error { _, err := s.Inspect(c.ctx, "k"); return err },
			"audit":   func() error { _, err := s.QueryAudit(c.ctx, lockstore.AuditQuery{}); return err },
			"ping":    func() error { return s.Ping(c.ctx) },
		}
		for name, f := range ops {
			if got := lockstore.CodeOf(f()); got != c.want {
				t.Errorf("%s: got %s, want %s", name, got, c.want)
			}
		}
	}
	// Mid-flight: the context ends while the acquire waits for another
	// transaction of this store on the same document.
	unlock, err := s.inflight.lock(bg(t), "test", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	tctx, cancel3 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel3()
	if _, err := s.Acquire(tctx, "k", time.Second); lockstore.CodeOf(err) != lockstore.NetworkTimeout {
		t.Errorf("acquire whose deadline passes while waiting: %v, want NetworkTimeout", err)
	}
	cctx, cancel4 := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel4)
	if _, err := s.Acquire(cctx, "k", time.Second); lockstore.CodeOf(err) != lockstore.Aborted {
		t.Errorf("acquire cancelled while waiting: %v, want Aborted", err)
	}
	if locked, err := s.IsLocked(bg(t), "k"); err != nil || locked {
		t.Errorf("IsLocked after the interrupted acquires = %v, %v; want false", locked, err)
	}
}

// TestUnreachable: a store pointed at a closed port fails with a transient
// code (ServiceUnavailable, or NetworkTimeout once the caller's deadline
// passes while the client retries), never Internal or a hang.
func TestUnreachable(t *testing.T) {
	needEmulator(t)
	t.Setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:1")
	s, err := Open(context.Background(), Config{ProjectID: testProject, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err = s.Acquire(ctx, "k", time.Second)
	if c := lockstore.CodeOf(err); c != lockstore.ServiceUnavailable && c != lockstore.NetworkTimeout {
		t.Fatalf("Acquire against a closed port = %v (%s), want ServiceUnavailable or NetworkTimeout", err, c)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("took %s; the caller's deadline was 3s", time.Since(start))
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping against a closed port succeeded")
	}
}

// TestClosedStore: operations after Close fail ServiceUnavailable before
// any I/O; Close stays idempotent.
func TestClosedStore(t *testing.T) {
	t.Parallel()
	s := openStore(t, nsConfig(t, uniqueNS(t)))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Acquire(bg(t), "k", time.Second); lockstore.CodeOf(err) != lockstore.ServiceUnavailable {
		t.Fatalf("Acquire after Close = %v", err)
	}
}

// TestCrossProcessContention: separate stores (separate clients, as
// separate gateways would be) race for one key, so the contention meets
// inside Firestore rather than in one store's per-key serialisation.
// Exactly one wins per round and fences never repeat; a racer may give up
// with ServiceUnavailable after its bounded transaction retries, never
// with a wrong answer. Kept modest: the emulator resolves each such
// deadlock only by its 2 s lock timeout.
func TestCrossProcessContention(t *testing.T) {
	t.Parallel()
	cfg := nsConfig(t, uniqueNS(t))
	const rounds, racers = 3, 3
	stores := make([]*Store, racers)
	for i := range stores {
		stores[i] = openStore(t, cfg)
	}
	seen := map[string]bool{}
	for round := range rounds {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			wins []lockstore.AcquireResult
			errs []error
		)
		for _, s := range stores {
			wg.Go(func() {
				r, err := s.Acquire(bg(t), "hot", 10*time.Second)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if r.OK {
					wins = append(wins, r)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if lockstore.CodeOf(err) != lockstore.ServiceUnavailable {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if len(wins) != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1 (errors: %v)", round, len(wins), errs)
		}
		if seen[wins[0].Fence] {
			t.Fatalf("fence %s issued twice", wins[0].Fence)
		}
		seen[wins[0].Fence] = true
		if rr, err := stores[round%racers].Release(bg(t), wins[0].LockID); err != nil || !rr.OK {
			t.Fatalf("Release from another store = %+v, %v", rr, err)
		}
	}
}

// TestCountHeld counts live locks only.
func TestCountHeld(t *testing.T) {
	t.Parallel()
	clk := testutil.NewClock(time.Now())
	cfg := nsConfig(t, uniqueNS(t))
	cfg.Now = clk.Now
	s := openStore(t, cfg)
	locktest.Acquire(t, s, "a", time.Second)
	locktest.Acquire(t, s, "b", time.Minute)
	if n, err := s.CountHeld(bg(t)); err != nil || n != 2 {
		t.Fatalf("CountHeld = %d, %v; want 2", n, err)
	}
	clk.Advance(2*time.Second + lockstore.TimeToleranceMs*time.Millisecond)
	if n, err := s.CountHeld(bg(t)); err != nil || n != 1 {
		t.Fatalf("CountHeld after one expired = %d, %v; want 1", n, err)
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	s := openStore(t, nsConfig(t, uniqueNS(t)))
	if err := s.Ping(bg(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func TestErrorsCarryNoRawKey(t *testing.T) {
	t.Parallel()
	s := openStore(t, nsConfig(t, uniqueNS(t)))
	secret := "secret-key-value"
	if _, err := s.fences.Doc("fence:"+secret).Set(bg(t), map[string]any{"fence": "bad"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Acquire(bg(t), secret, time.Second)
	var le *lockstore.Error
	if !errors.As(err, &le) || le.Key != secret {
		t.Fatalf("error %v does not carry the key for the caller", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("error text leaks the raw key: %v", err)
	}
}

// TestHashedDocIDCollisionIsNotReported: "a/b" is not a legal document ID,
// so its lock lives under a hashed ID; a user key spelling that hash reads
// the same document. Reads of that key must not report "a/b"'s lock as its
// own (the edge check would accept "a/b"'s fence for it), while the shared
// counter keeps both keys' fences increasing.
func TestHashedDocIDCollisionIsNotReported(t *testing.T) {
	s := openStore(t, nsConfig(t, uniqueNS(t)))
	ctx := context.Background()
	hashed, _, err := docIDs("a/b")
	if err != nil {
		t.Fatal(err)
	}
	held, err := s.Acquire(ctx, "a/b", time.Minute)
	if err != nil || !held.OK {
		t.Fatalf("acquire a/b: %+v %v", held, err)
	}
	if info, err := s.LookupKey(ctx, hashed); err != nil || info != nil {
		t.Fatalf("LookupKey(%q) = %+v %v, want nil: the document is a/b's", hashed, info, err)
	}
	if locked, err := s.IsLocked(ctx, hashed); err != nil || locked {
		t.Fatalf("IsLocked(%q) = %v %v, want false", hashed, locked, err)
	}
	st, err := s.Inspect(ctx, hashed)
	if err != nil || st.Live != nil {
		t.Fatalf("Inspect(%q) = %+v %v, want no live lock", hashed, st, err)
	}
	if r, err := s.Acquire(ctx, hashed, time.Minute); err != nil || r.OK {
		t.Fatalf("acquire %q while a/b holds the shared document = %+v %v, want contention", hashed, r, err)
	}
	if own, err := s.Inspect(ctx, "a/b"); err != nil || own.Live == nil || own.Live.Fence != held.Fence {
		t.Fatalf("Inspect(a/b) = %+v %v", own, err)
	}
}

// TestFenceWarning: an acquire that issues a fence past FenceWarn logs
// backend.NoteFence's warning once, after the commit, with the key's
// hash and never the key.
func TestFenceWarning(t *testing.T) {
	t.Parallel()
	var logs testutil.LogBuffer
	cfg := floorOff(nsConfig(t, uniqueNS(t)))
	cfg.Logger = testutil.Logger(&logs, nil)
	s := openStore(t, cfg)
	const key = "tenant-7/secret-resource"
	setFence(t, s, key, lockstore.FenceWarn)
	r := locktest.Acquire(t, s, key, time.Second)
	out := logs.String()
	if strings.Count(out, "fence counter past the warning level") != 1 ||
		!strings.Contains(out, "level=WARN") || !strings.Contains(out, "keyHash="+lockstore.HashKey(key)) {
		t.Fatalf("want one WARN line with the keyHash past FenceWarn:\n%s", out)
	}
	if strings.Contains(out, key) || strings.Contains(out, r.LockID) {
		t.Fatalf("log leaks the raw key or lockId:\n%s", out)
	}
}
