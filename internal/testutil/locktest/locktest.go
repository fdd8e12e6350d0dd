// Package locktest holds the test helpers that need lockstore: a real
// embedded (bolt) store in a temporary directory, taking and releasing
// locks that must succeed, and MemStore, the in-memory fake store that
// package lock's and lockstore's helper tests share. It is apart from testutil only because it
// imports lockstore/bolt, which lockstore's and bolt's own tests (users of
// testutil) cannot import back. Tests only, like testutil.
package locktest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/bolt"
)

// OpenBolt opens a bolt store on a fresh file in tb's temporary directory,
// configured as production opens it but with a discarding logger; edit,
// if given, changes the Config first (FloorOff, Logger, Path, ...). The
// store is closed at cleanup.
func OpenBolt(tb testing.TB, edit ...func(*bolt.Config)) *bolt.Store {
	tb.Helper()
	cfg := bolt.Config{
		Path:   filepath.Join(tb.TempDir(), "fence.db"),
		Logger: slog.New(slog.DiscardHandler),
	}
	for _, e := range edit {
		e(&cfg)
	}
	// Not tb.Context(): the store outlives the test body into cleanups.
	s, err := bolt.Open(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("open bolt store %s: %v", cfg.Path, err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// FloorOff is an edit for OpenBolt: consecutive fences (1, 2, 3, ...), for
// tests that count them.
func FloorOff(c *bolt.Config) { c.FenceFloor = backend.FloorOff }

// opTimeout bounds each call of Acquire and Release.
const opTimeout = 30 * time.Second

// Acquire takes key for ttl and fails tb unless the store granted it.
func Acquire(tb testing.TB, s lockstore.Store, key string, ttl time.Duration) lockstore.AcquireResult {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	r, err := s.Acquire(ctx, key, ttl)
	if err != nil || !r.OK {
		tb.Fatalf("Acquire(%q) = %+v, %v; want the lock", key, r, err)
	}
	return r
}

// Release releases lockID and fails tb unless it was held.
func Release(tb testing.TB, s lockstore.Store, lockID string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if r, err := s.Release(ctx, lockID); err != nil || !r.OK {
		tb.Fatalf("Release = %+v, %v; want the held lock released", r, err)
	}
}

// HandOver releases l (which must be held) and takes key again for ttl:
// the next holder, under a newer fence.
func HandOver(tb testing.TB, s lockstore.Store, l lockstore.AcquireResult, key string, ttl time.Duration) lockstore.AcquireResult {
	tb.Helper()
	Release(tb, s, l.LockID)
	return Acquire(tb, s, key, ttl)
}

// DecisionKeys are the locks the edges' decision tables (ext_authz,
// ext_proc, the proxy) run against: orders/1 held under Cur, its second
// fence (Old, its first, lost to a release); orders/2 released (Gone: no
// holder, its latest fence Gone.Fence); orders/42 held under Tpl (reached
// through a key template).
type DecisionKeys struct{ Old, Cur, Gone, Tpl lockstore.AcquireResult }

// NewDecisionKeys takes DecisionKeys' locks on s, in that order.
func NewDecisionKeys(tb testing.TB, s lockstore.Store) DecisionKeys {
	tb.Helper()
	var k DecisionKeys
	k.Old = Acquire(tb, s, "orders/1", time.Minute)
	k.Cur = HandOver(tb, s, k.Old, "orders/1", time.Minute)
	k.Gone = Acquire(tb, s, "orders/2", time.Minute)
	Release(tb, s, k.Gone.LockID)
	k.Tpl = Acquire(tb, s, "orders/42", time.Minute)
	return k
}
