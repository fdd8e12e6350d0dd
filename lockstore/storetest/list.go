package storetest

import (
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// listHeld: a LockLister lists exactly the live locks of its namespace,
// with the raw key, the lockId only hashed, the fence and expiry of the
// lock; not released or expired ones; and honours the limit, saying
// Partial when it cut the answer.
func (s *suite) listHeld(t *caseT) {
	st, _ := s.fresh(t)
	ll, ok := st.(lockstore.LockLister)
	if !ok {
		t.Skipf("%T does not implement lockstore.LockLister (optional)", st)
	}
	list := func(limit int) lockstore.LockList {
		t.Helper()
		l, err := ll.ListHeld(ctx(t), limit)
		if err != nil {
			t.Fatalf("ListHeld(%d): %v", limit, err)
		}
		return l
	}
	if l := list(0); len(l.Locks) != 0 || l.Partial {
		t.Fatalf("ListHeld on a fresh namespace = %+v, want no locks, not partial", l)
	}
	a := acquire(t, st, "list-a", 10*time.Second)
	b := acquire(t, st, "list-b", 10*time.Second)
	short := acquire(t, st, "list-short", 200*time.Millisecond)
	release(t, st, a.LockID)
	t.sleepUntil(s.freeAt(short.ExpiresAtMs))

	l := list(0)
	if l.Partial || len(l.Locks) != 1 {
		t.Fatalf("ListHeld with one live lock (one released, one expired) = %+v, want exactly list-b", l)
	}
	got := l.Locks[0]
	want := lockstore.ListedLock{Key: "list-b", LockInfo: lockstore.LockInfo{
		KeyHash: lockstore.HashKey("list-b"), LockIDHash: lockstore.HashKey(b.LockID),
		Fence: b.Fence, ExpiresAtMs: b.ExpiresAtMs, AcquiredAtMs: got.AcquiredAtMs,
	}}
	if got != want {
		t.Errorf("ListHeld entry = %+v, want %+v", got, want)
	}
	if got.ExpiresAtMs-got.AcquiredAtMs != 10_000 {
		t.Errorf("ListHeld entry expiresAtMs - acquiredAtMs = %d, want the ttl 10000", got.ExpiresAtMs-got.AcquiredAtMs)
	}
	for _, f := range []string{got.Key, got.KeyHash, got.LockIDHash, got.Fence} {
		if strings.Contains(f, b.LockID) {
			t.Errorf("ListHeld leaks the lockId: %+v", got)
		}
	}
	if d := l.NowMs - t.nowMs(); d < -5000 || d > 5000 {
		t.Errorf("ListHeld NowMs is %d ms off this machine's clock", d)
	}

	acquire(t, st, "list-c", 10*time.Second)
	if l := list(1); len(l.Locks) != 1 || !l.Partial {
		t.Errorf("ListHeld(1) with two live locks = %d locks, partial %v; want 1, partial", len(l.Locks), l.Partial)
	}
	if l := list(0); len(l.Locks) != 2 || l.Partial {
		t.Errorf("ListHeld with two live locks = %d locks, partial %v; want 2, not partial", len(l.Locks), l.Partial)
	}
}
