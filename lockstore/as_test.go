package lockstore_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/internal/storetelemetry"
	"github.com/fencegate/fencegate/lockstore"
)

// lister is an optional capability for the test; wrapLocks a wrapper of
// the lock role that, like the console's recorder or the API's bounds,
// implements Locks and nothing optional.
type (
	lister    struct{ *memStore }
	wrapLocks struct {
		lockstore.Locks
		inner any
	}
	selfWrap struct{}
)

func (lister) ListHeld(context.Context, int) (lockstore.LockList, error) {
	return lockstore.LockList{NowMs: 1}, nil
}
func (w wrapLocks) Unwrap() any { return w.inner }
func (s selfWrap) Unwrap() any  { return s }

// TestAs: an optional capability is found through any number of wrappers
// of any role, the outermost implementation first; one no layer has is
// not found; a wrapper unwrapping to itself ends the walk.
func TestAs(t *testing.T) {
	store := lister{newMemStore()}
	var l lockstore.Locks = store
	for range 3 {
		l = wrapLocks{Locks: l, inner: l}
	}
	l = storetelemetry.WithTelemetry(l, storetelemetry.TelemetryOptions{})
	if ll, ok := lockstore.As[lockstore.LockLister](l); !ok || ll != lockstore.LockLister(store) {
		t.Fatalf("As[LockLister] through 4 wrappers = %v, %v", ll, ok)
	}
	if _, ok := lockstore.As[lockstore.BarrierSweeper](l); ok {
		t.Fatal("As found a BarrierSweeper no layer implements")
	}
	if got, ok := lockstore.As[lockstore.Locks](l); !ok || got != l {
		t.Fatal("As[Locks] did not answer the outermost wrapper")
	}
	if _, ok := lockstore.As[lockstore.Pinger](nil); ok {
		t.Fatal("As[Pinger](nil) found something")
	}
	if _, ok := lockstore.As[lockstore.Pinger](selfWrap{}); ok {
		t.Fatal("a self-unwrapping value produced a Pinger")
	}
}
