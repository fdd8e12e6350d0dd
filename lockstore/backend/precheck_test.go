package backend

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// TestPreambles: arguments are validated before the context is looked at
// (a bad argument is InvalidArgument even with a dead context), a dead
// context is Aborted or NetworkTimeout, and good arguments come back
// normalised.
func TestPreambles(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel2 := context.WithDeadline(live, time.Now().Add(-time.Second))
	defer cancel2()
	id, err := lockstore.NewLockID()
	if err != nil {
		t.Fatal(err)
	}
	const composed, nfc = "cafe\u0301", "caf\u00e9"

	type call func(ctx context.Context) error
	calls := []struct {
		name      string
		good, bad call
	}{
		{"PrecheckKey",
			func(c context.Context) error {
				nk, err := PrecheckKey(c, "lookup", composed)
				if err == nil && nk != nfc {
					t.Errorf("PrecheckKey returned %q, want the NFC key", nk)
				}
				return err
			},
			func(c context.Context) error { _, err := PrecheckKey(c, "lookup", ""); return err }},
		{"PrecheckLockID",
			func(c context.Context) error { return PrecheckLockID(c, "release", id) },
			func(c context.Context) error { return PrecheckLockID(c, "release", "short") }},
		{"PrecheckAcquire",
			func(c context.Context) error {
				nk, ms, err := PrecheckAcquire(c, composed, 1500*time.Millisecond)
				if err == nil && (nk != nfc || ms != 1500) {
					t.Errorf("PrecheckAcquire returned %q, %d; want the NFC key and 1500", nk, ms)
				}
				return err
			},
			func(c context.Context) error { _, _, err := PrecheckAcquire(c, "k", time.Microsecond); return err }},
		{"PrecheckExtend",
			func(c context.Context) error {
				ms, err := PrecheckExtend(c, id, 2*time.Second)
				if err == nil && ms != 2000 {
					t.Errorf("PrecheckExtend returned %d, want 2000", ms)
				}
				return err
			},
			func(c context.Context) error { _, err := PrecheckExtend(c, id, 0); return err }},
	}
	for _, c := range calls {
		if err := c.good(live); err != nil {
			t.Errorf("%s(live ctx, good args): %v", c.name, err)
		}
		if got := lockstore.CodeOf(c.good(cancelled)); got != lockstore.Aborted {
			t.Errorf("%s(cancelled ctx) = %s, want Aborted", c.name, got)
		}
		if got := lockstore.CodeOf(c.good(expired)); got != lockstore.NetworkTimeout {
			t.Errorf("%s(expired ctx) = %s, want NetworkTimeout", c.name, got)
		}
		for _, ctx := range []context.Context{live, cancelled} {
			if got := lockstore.CodeOf(c.bad(ctx)); got != lockstore.InvalidArgument {
				t.Errorf("%s(bad args) = %s, want InvalidArgument whatever the context", c.name, got)
			}
		}
	}
}
