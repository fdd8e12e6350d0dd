package lock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

func acquireHeld(t *testing.T, m *memStore, key string, ttl time.Duration) Held {
	t.Helper()
	sent := time.Now()
	r, err := m.Acquire(context.Background(), key, ttl)
	if err != nil || !r.OK {
		t.Fatalf("acquire: %+v %v", r, err)
	}
	return NewHeld(key, r, sent, ttl)
}

func TestKeepAliveStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		h := acquireHeld(t, m, "k", time.Second)
		lease, err := KeepAlive(context.Background(), m, h, time.Second, quiet)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1200 * time.Millisecond) // extends at 500 and 1000
		lease.Stop()
		lease.Stop() // idempotent
		select {
		case <-lease.Done():
		default:
			t.Fatal("Done not closed after Stop")
		}
		if !errors.Is(context.Cause(lease.Context()), ErrKeepAliveStopped) || lease.Lost() != nil {
			t.Errorf("cause %v, Lost %v: a stop is not a loss", context.Cause(lease.Context()), lease.Lost())
		}
		_, before, _ := m.Counts()
		time.Sleep(5 * time.Second)
		if _, after, _ := m.Counts(); after != before || before != 2 {
			t.Errorf("extends: %d before Stop (want 2), %d after", before, after)
		}
		// Stop does not release: the lock is still there until its TTL.
		if len(m.Releases()) != 0 {
			t.Error("Stop released the lock")
		}
	})
}

func TestKeepAliveParentCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		h := acquireHeld(t, m, "k", time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		lease, err := KeepAlive(ctx, m, h, time.Second, quiet)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		<-lease.Done()
		lease.Stop()
		if lease.Lost() != nil {
			t.Errorf("parent cancel reported as a loss: %v", lease.Lost())
		}
	})
}

func TestKeepAliveUnknownSendTimeExtendsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		r, err := m.Acquire(context.Background(), "k", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// A Held built by hand (e.g. from an HTTP answer) without a send
		// time: no bound to schedule from.
		h := Held{Key: "k", LockID: r.LockID, Fence: r.Fence}
		start := time.Now()
		lease, err := KeepAlive(context.Background(), m, h, 10*time.Second, quiet)
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Stop()
		synctest.Wait()
		if len(m.Extends()) != 1 || !m.Extends()[0].Equal(start) {
			t.Fatalf("extends %v, want one at once", offsets(m.Extends()))
		}
		if got := lease.Held().ExpiresAtMs(); got != start.Add(10*time.Second).UnixMilli() {
			t.Errorf("lease Held ExpiresAtMs = %d", got)
		}
		if !lease.Held().ValidUntil().Equal(start.Add(10 * time.Second)) {
			t.Errorf("ValidUntil = %v", lease.Held().ValidUntil())
		}
	})
}

func TestKeepAliveExtendAtFraction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		start := time.Now()
		h := acquireHeld(t, m, "k", 10*time.Second)
		lease, err := KeepAlive(context.Background(), m, h, 10*time.Second, quiet, ExtendAt(0.25), LossMargin(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(8 * time.Second)
		lease.Stop()
		if got := offsets(append([]time.Time{start}, m.Extends()...)); !equalInts(got, []int64{0, 2500, 5000, 7500}) {
			t.Errorf("extends at %v ms, want every 2.5s", got)
		}
	})
}

func TestKeepAliveValidation(t *testing.T) {
	m := newMemStore()
	good := Held{Key: "k", LockID: "AAAAAAAAAAAAAAAAAAAAAA"}
	cases := []struct {
		name string
		h    Held
		ttl  time.Duration
		opts []KeepAliveOption
	}{
		{"bad lockId", Held{Key: "k", LockID: "short"}, time.Second, nil},
		{"zero ttl", good, 0, nil},
		{"fraction 1", good, time.Second, []KeepAliveOption{ExtendAt(1)}},
		{"margin too big", good, time.Second, []KeepAliveOption{LossMargin(time.Second)}},
	}
	for _, c := range cases {
		if _, err := KeepAlive(context.Background(), m, c.h, c.ttl, c.opts...); lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", c.name, err)
		}
	}
	if len(m.Extends()) != 0 {
		t.Error("an invalid KeepAlive called Extend")
	}
}

func TestLockLostError(t *testing.T) {
	cause := &lockstore.Error{Code: lockstore.AuthFailed, Op: "extend", Key: "secret-key"}
	e := &LockLostError{Reason: LostExtendError, Err: cause}
	if !errors.Is(e, ErrLockLost) || !errors.Is(e, &lockstore.Error{Code: lockstore.AuthFailed}) {
		t.Error("LockLostError does not match ErrLockLost and its cause")
	}
	if errors.Is(ErrKeepAliveStopped, ErrLockLost) {
		t.Error("stopping is not losing")
	}
	if msg := e.Error(); msg == "" || strings.Contains(msg, "secret-key") {
		t.Errorf("message %q", msg)
	}
}

// TestLockLostErrorCode: a loss caused by a failed extend keeps the
// extend's code for lockstore.CodeOf, and matches ErrLockLost.
func TestLockLostErrorCode(t *testing.T) {
	err := error(&LockLostError{Reason: LostExtendError, Err: &lockstore.Error{Code: lockstore.RateLimited, Op: "extend"}})
	if lockstore.CodeOf(err) != lockstore.RateLimited || !errors.Is(err, ErrLockLost) {
		t.Errorf("CodeOf = %s, Is(ErrLockLost) = %v", lockstore.CodeOf(err), errors.Is(err, ErrLockLost))
	}
}
