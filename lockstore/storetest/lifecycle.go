package storetest

import (
	"strconv"
	"sync"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

func (s *suite) capabilities(t *caseT) {
	st, _ := s.fresh(t)
	c := st.Capabilities()
	if c.Backend == "" {
		t.Error("Capabilities.Backend is empty")
	}
	if c.TimeAuthority != lockstore.ServerTime && c.TimeAuthority != lockstore.ClientTime {
		t.Errorf("Capabilities.TimeAuthority = %q, want server or client", c.TimeAuthority)
	}
	if err := st.Ping(ctx(t)); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

// lifecycle walks one lock through acquire → isLocked → lookup → extend →
// release → free, checking every read path at each step.
func (s *suite) lifecycle(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "resource:123"
	wantFree(t, st, key, "")

	r := acquire(t, st, key, 10*time.Second)
	if r.Fence != fence(t, 1) {
		t.Errorf("first fence of a fresh key = %q, want %q (counters start at 0)", r.Fence, fence(t, 1))
	}
	wantLocked(t, st, key, true)
	wantInfo(t, "LookupKey", lookupKey(t, st, key), key, r)
	wantInfo(t, "LookupLockID", lookupID(t, st, r.LockID), key, r)
	if li := lookupKey(t, st, key); li.KeyHash != "e90a28c676a29a3291e2874a" {
		t.Errorf("KeyHash of %q = %q, want the SyncGuard value e90a28c676a29a3291e2874a", key, li.KeyHash)
	}

	before := t.nowMs()
	e := extend(t, st, r.LockID, 20*time.Second)
	after := t.nowMs()
	if !e.OK {
		t.Fatalf("Extend of a live lock: OK=false Detail=%q", e.Detail)
	}
	checkExpiry(t, "Extend", e.ExpiresAtMs, before, after, 20*time.Second)
	if e.ExpiresAtMs <= r.ExpiresAtMs {
		t.Errorf("Extend to 20s: expiresAtMs %d not after the 10s acquire's %d", e.ExpiresAtMs, r.ExpiresAtMs)
	}
	if li := lookupKey(t, st, key); li == nil || li.ExpiresAtMs != e.ExpiresAtMs {
		t.Errorf("LookupKey after Extend = %+v, want expiresAtMs %d", li, e.ExpiresAtMs)
	}

	if !release(t, st, r.LockID) {
		t.Fatal("Release of a live lock: OK=false")
	}
	wantFree(t, st, key, r.LockID)
}

// contention: a held key refuses a second acquire with Reason "locked",
// hands out nothing and consumes no fence.
func (s *suite) contention(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "contended"
	r1 := acquire(t, st, key, 10*time.Second)

	r2, err := st.Acquire(ctx(t), key, 10*time.Second)
	if err != nil {
		t.Fatalf("second Acquire: contention must be a result, got error %v", err)
	}
	if r2.OK || r2.Reason != lockstore.ReasonLocked {
		t.Fatalf("second Acquire = OK=%v Reason=%q, want OK=false Reason=%q", r2.OK, r2.Reason, lockstore.ReasonLocked)
	}
	if r2.LockID != "" || r2.Fence != "" || r2.ExpiresAtMs != 0 {
		t.Errorf("contended Acquire leaked a handle: %+v", r2)
	}
	// The holder is untouched.
	wantInfo(t, "LookupKey", lookupKey(t, st, key), key, r1)
	if ks := inspect(t, st, key); ks.LatestFence != r1.Fence {
		t.Errorf("Inspect.LatestFence after contention = %q, want %q (a refused acquire issues no fence)", ks.LatestFence, r1.Fence)
	}

	if !release(t, st, r1.LockID) {
		t.Fatal("Release: OK=false")
	}
	r3 := acquire(t, st, key, time.Second)
	if got, want := fenceNum(t, r3.Fence), fenceNum(t, r1.Fence)+1; got != want {
		t.Errorf("fence after a refused acquire = %d, want %d (contention must not consume fences)", got, want)
	}
}

// raceOneWinner: goroutines racing on one free key produce exactly one
// holder per round; every fence ever handed out is distinct and grows.
func (s *suite) raceOneWinner(t *caseT) {
	st, _ := s.fresh(t)
	const (
		racers = 16
		rounds = 5
		key    = "race"
	)
	seen := map[string]bool{}
	var last int64
	for round := range rounds {
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results [racers]lockstore.AcquireResult
			errs    [racers]error
		)
		for i := range racers {
			wg.Go(func() {
				<-start
				results[i], errs[i] = st.Acquire(ctx(t), key, 10*time.Second)
			})
		}
		close(start)
		wg.Wait()

		var winners []lockstore.AcquireResult
		for i := range racers {
			switch {
			case errs[i] != nil:
				t.Fatalf("round %d racer %d: %v", round, i, errs[i])
			case results[i].OK:
				winners = append(winners, results[i])
			case results[i].Reason != lockstore.ReasonLocked:
				t.Fatalf("round %d racer %d: OK=false Reason=%q, want %q", round, i, results[i].Reason, lockstore.ReasonLocked)
			}
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, len(winners))
		}
		w := winners[0]
		if seen[w.Fence] {
			t.Fatalf("round %d: fence %s handed out twice", round, w.Fence)
		}
		seen[w.Fence] = true
		if n := fenceNum(t, w.Fence); n <= last {
			t.Fatalf("round %d: fence %d not above the previous round's %d", round, n, last)
		} else {
			last = n
		}
		if !release(t, st, w.LockID) {
			t.Fatalf("round %d: winner's Release OK=false", round)
		}
	}
}

// doubleRelease: release is idempotent — true once, then false — and a
// released lock can no longer be extended.
func (s *suite) doubleRelease(t *caseT) {
	st, _ := s.fresh(t)
	r := acquire(t, st, "twice", 10*time.Second)
	if !release(t, st, r.LockID) {
		t.Fatal("first Release: OK=false")
	}
	if release(t, st, r.LockID) {
		t.Fatal("second Release: OK=true, want false")
	}
	if e := extend(t, st, r.LockID, 10*time.Second); e.OK {
		t.Fatal("Extend after Release: OK=true, want false")
	}
	wantFree(t, st, "twice", r.LockID)

	// Racing releases of one lockId: exactly one wins; racing extends
	// cannot bring the lock back.
	r = acquire(t, st, "twice", 10*time.Second)
	const racers = 8
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		released [racers]bool
		errs     [racers]error
	)
	for i := range racers {
		wg.Go(func() {
			<-start
			if i%2 == 1 {
				_, errs[i] = st.Extend(ctx(t), r.LockID, time.Hour)
				return
			}
			var rr lockstore.ReleaseResult
			rr, errs[i] = st.Release(ctx(t), r.LockID)
			released[i] = rr.OK
		})
	}
	close(start)
	wg.Wait()
	wins := 0
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if released[i] {
			wins++
		}
	}
	if wins != 1 {
		t.Fatalf("%d racing releases of one lockId returned OK, want exactly 1", wins)
	}
	wantFree(t, st, "twice", r.LockID)
}

// internalKeys: user keys that spell a backend's internal names ("id:" +
// a live lockId, "fence:" + a key) must not alias the lockId index or a
// fence counter. A store may refuse such keys with InvalidArgument; if it
// takes them, they are ordinary independent locks.
func (s *suite) internalKeys(t *caseT) {
	st, _ := s.freshConsecutive(t)
	victim := acquire(t, st, "victim", 10*time.Second)
	for _, key := range []string{"id:" + victim.LockID, "fence:victim", "fence:" + victim.LockID, "id:"} {
		r, err := st.Acquire(ctx(t), key, 10*time.Second)
		switch {
		case err != nil && lockstore.CodeOf(err) == lockstore.InvalidArgument:
			continue
		case err != nil:
			t.Fatalf("Acquire(%q): %v", key, err)
		case !r.OK:
			t.Fatalf("Acquire(%q) = OK=false Reason=%q on a never-locked key; it aliases internal state", key, r.Reason)
		}
		if r.Fence != fence(t, 1) {
			t.Errorf("Acquire(%q) fence = %s, want %s; it aliases a fence counter", key, r.Fence, fence(t, 1))
		}
		wantInfo(t, "LookupKey(victim)", lookupKey(t, st, "victim"), "victim", victim)
		wantInfo(t, "LookupLockID(victim)", lookupID(t, st, victim.LockID), "victim", victim)
		if !release(t, st, r.LockID) {
			t.Fatalf("Release of the %q lock: OK=false", key)
		}
	}
	if !release(t, st, victim.LockID) {
		t.Fatal("Release(victim) after the look-alike keys: OK=false")
	}
	next := acquire(t, st, "victim", time.Second)
	if got, want := fenceNum(t, next.Fence), fenceNum(t, victim.Fence)+1; got != want {
		t.Errorf("victim's next fence = %d, want %d", got, want)
	}
}

// manyKeys: concurrent acquires of distinct keys all succeed, each with
// its own fence sequence.
func (s *suite) manyKeys(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const n = 24
	var (
		wg      sync.WaitGroup
		results [n]lockstore.AcquireResult
		errs    [n]error
	)
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = st.Acquire(ctx(t), "many-"+strconv.Itoa(i), 10*time.Second)
		})
	}
	wg.Wait()
	ids := map[string]bool{}
	for i := range n {
		if errs[i] != nil || !results[i].OK {
			t.Fatalf("Acquire(many-%d) = %+v, %v; want OK", i, results[i], errs[i])
		}
		if results[i].Fence != fence(t, 1) {
			t.Errorf("many-%d: first fence %s, want %s", i, results[i].Fence, fence(t, 1))
		}
		if ids[results[i].LockID] {
			t.Fatalf("lockId handed out twice")
		}
		ids[results[i].LockID] = true
	}
	for i := range n {
		wantInfo(t, "LookupLockID", lookupID(t, st, results[i].LockID), "many-"+strconv.Itoa(i), results[i])
	}
}

// foreignLockIDs: a lockId that was never issued, a near miss of the live
// one, and another key's live lockId can neither release nor extend this
// key's lock.
func (s *suite) foreignLockIDs(t *caseT) {
	st, _ := s.fresh(t)
	a := acquire(t, st, "key-a", 10*time.Second)
	b := acquire(t, st, "key-b", 30*time.Second)

	unknown, err := lockstore.NewLockID()
	if err != nil {
		t.Fatal(err)
	}
	// A well-formed lockId one character away from the holder's.
	near := []byte(a.LockID)
	if near[10] == 'A' {
		near[10] = 'B'
	} else {
		near[10] = 'A'
	}
	for _, c := range []struct{ name, id string }{
		{"unknown", unknown},
		{"near-miss", string(near)},
	} {
		if release(t, st, c.id) {
			t.Errorf("Release(%s lockId) = OK", c.name)
		}
		if e := extend(t, st, c.id, time.Hour); e.OK {
			t.Errorf("Extend(%s lockId) = OK", c.name)
		}
		if li := lookupID(t, st, c.id); li != nil {
			t.Errorf("LookupLockID(%s lockId) = %+v, want nil", c.name, *li)
		}
	}
	wantInfo(t, "LookupKey(a) after foreign attempts", lookupKey(t, st, "key-a"), "key-a", a)

	// key-b's lockId acts on key-b only: extending it leaves key-a's expiry
	// alone, releasing it leaves key-a held.
	if e := extend(t, st, b.LockID, 5*time.Second); !e.OK {
		t.Fatal("Extend(b) OK=false")
	}
	if !release(t, st, b.LockID) {
		t.Fatal("Release(b) OK=false")
	}
	wantInfo(t, "LookupKey(a) after b's release", lookupKey(t, st, "key-a"), "key-a", a)
	wantFree(t, st, "key-b", b.LockID)
}

// staleHolder: after a lock expires and another holder takes the key, the
// old lockId must not release or extend the new holder's lock.
func (s *suite) staleHolder(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "stale"
	old := acquire(t, st, key, 100*time.Millisecond)
	t.sleepUntil(s.freeAt(old.ExpiresAtMs))
	cur := acquire(t, st, key, 10*time.Second)
	if got, want := fenceNum(t, cur.Fence), fenceNum(t, old.Fence)+1; got != want {
		t.Errorf("fence after expiry = %d, want %d (an expired key's counter is never reset)", got, want)
	}
	if release(t, st, old.LockID) {
		t.Error("Release(stale lockId) = OK")
	}
	if e := extend(t, st, old.LockID, time.Hour); e.OK {
		t.Error("Extend(stale lockId) = OK")
	}
	if li := lookupID(t, st, old.LockID); li != nil {
		t.Errorf("LookupLockID(stale lockId) = %+v, want nil", *li)
	}
	wantInfo(t, "LookupKey after stale attempts", lookupKey(t, st, key), key, cur)
}

// heldCounter checks HeldCounter where the backend offers it.
func (s *suite) heldCounter(t *caseT) {
	st, _ := s.fresh(t)
	hc, ok := st.(lockstore.HeldCounter)
	if !ok {
		t.Skipf("%T does not implement lockstore.HeldCounter (optional)", st)
	}
	count := func() int64 {
		t.Helper()
		n, err := hc.CountHeld(ctx(t))
		if err != nil {
			t.Fatalf("CountHeld: %v", err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("CountHeld on a fresh namespace = %d, want 0", n)
	}
	a := acquire(t, st, "held-a", 10*time.Second)
	acquire(t, st, "held-b", 10*time.Second)
	if n := count(); n != 2 {
		t.Fatalf("CountHeld with two locks = %d, want 2", n)
	}
	release(t, st, a.LockID)
	if n := count(); n != 1 {
		t.Fatalf("CountHeld after one release = %d, want 1", n)
	}
}

// closeIdempotent: Close twice is fine.
func (s *suite) closeIdempotent(t *caseT) {
	ns := newNS(t)
	st := s.open(t, ns)
	acquire(t, st, "k", time.Second)
	if err := st.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v, want nil (Close is idempotent)", err)
	}
	// A closed store refuses work with an error; it does not panic or
	// pretend to succeed.
	if r, err := st.Acquire(ctx(t), "after-close", time.Second); err == nil {
		t.Errorf("Acquire on a closed store = %+v, nil; want an error", r)
	}
	if _, err := st.IsLocked(ctx(t), "k"); err == nil {
		t.Error("IsLocked on a closed store: no error")
	}
}
