package fencecheck

import (
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// TestMaxWriteCap: a barrier Request whose MaxWrite is above the
// gateway's cap fails closed (503 unavailable, ErrMaxWriteOverCap) and
// registers no entry; at or below the cap it is admitted. Without the cap
// (the broken variant: the 24 h limit only) the same request registers an
// entry that blocks the key's next holder for a day.
func TestMaxWriteCap(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cap      time.Duration
		maxWrite time.Duration
		admitted bool
	}{
		{"over the gateway's default cap", DefaultMaxWriteCap, 24 * time.Hour, false},
		{"over a configured cap", time.Minute, 2 * time.Minute, false},
		{"at the cap", time.Minute, time.Minute, true},
		{"the default maxWrite over a small cap", time.Second, 0, false},
		{"the default maxWrite under the gateway's default cap", DefaultMaxWriteCap, 0, true},
		{"broken: no cap (the zero Options) below the store's limit", 0, 24 * time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := locktest.OpenBolt(t, locktest.FloorOff)
			l, err := s.Acquire(t.Context(), "k", time.Minute)
			if err != nil || !l.OK {
				t.Fatal(l, err)
			}
			c := New(s, Options{MaxWriteCap: tc.cap, Timeout: time.Second})
			d, err := c.Check(t.Context(), Request{Write: true, Key: "k", Fence: l.Fence, Barrier: true, MaxWrite: tc.maxWrite})
			if d.Allowed != tc.admitted || (d.WriteID != "") != tc.admitted {
				t.Fatalf("allowed %v (write id %q), want %v; %+v %v", d.Allowed, d.WriteID, tc.admitted, d, err)
			}
			if !tc.admitted && (d.Reason != ReasonUnavailable || !errors.Is(err, ErrMaxWriteOverCap)) {
				t.Fatalf("refusal: reason %q err %v", d.Reason, err)
			}
		})
	}
}
