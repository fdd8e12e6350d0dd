package storetest

import (
	"encoding/json"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// fenceSequence: under backend.FloorOff a key's fences are 15 digits,
// start at 1, grow by one per successful acquire, and string order equals numeric order; JSON round
// trips them unchanged.
func (s *suite) fenceSequence(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "seq"
	var prev string
	for i := int64(1); i <= 12; i++ {
		r := acquire(t, st, key, 10*time.Second)
		if r.Fence != fence(t, i) {
			t.Fatalf("acquire #%d: fence %q, want %q", i, r.Fence, fence(t, i))
		}
		if prev != "" && !(r.Fence > prev) {
			t.Fatalf("fence %q does not sort after %q as a string", r.Fence, prev)
		}
		prev = r.Fence
		b, err := json.Marshal(r.Fence)
		if err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal(b, &back); err != nil || back != r.Fence {
			t.Fatalf("fence JSON round trip: %q → %s → %q (%v)", r.Fence, b, back, err)
		}
		if !release(t, st, r.LockID) {
			t.Fatalf("acquire #%d: Release OK=false", i)
		}
	}
}

// fencePerKey: counters are per key; key A's acquires don't advance B's.
func (s *suite) fencePerKey(t *caseT) {
	st, _ := s.freshConsecutive(t)
	b1 := acquire(t, st, "key-b", 10*time.Second)
	release(t, st, b1.LockID)
	for range 3 {
		a := acquire(t, st, "key-a", 10*time.Second)
		release(t, st, a.LockID)
	}
	if ks := inspect(t, st, "key-a"); ks.LatestFence != fence(t, 3) {
		t.Errorf("key-a LatestFence = %q, want %q", ks.LatestFence, fence(t, 3))
	}
	b2 := acquire(t, st, "key-b", 10*time.Second)
	if got, want := fenceNum(t, b2.Fence), fenceNum(t, b1.Fence)+1; got != want {
		t.Fatalf("key-b fence after key-a's acquires = %d, want %d (counters are per key)", got, want)
	}
	// A key that only shares a prefix with another is a different key.
	c := acquire(t, st, "key-b:suffix", 10*time.Second)
	if c.Fence != fence(t, 1) {
		t.Errorf("first fence of key-b:suffix = %q, want %q", c.Fence, fence(t, 1))
	}
}

// fenceSurvivesReopen: counters and live locks are durable — a closed and
// reopened store continues the sequence and still sees the held lock.
func (s *suite) fenceSurvivesReopen(t *caseT) {
	ns := newNS(t)
	st := s.openConsecutive(t, ns)
	r1 := acquire(t, st, "durable", 10*time.Second)
	release(t, st, r1.LockID)
	held := acquire(t, st, "held", time.Minute)
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	st2 := s.openConsecutive(t, ns)
	r2 := acquire(t, st2, "durable", 10*time.Second)
	if got, want := fenceNum(t, r2.Fence), fenceNum(t, r1.Fence)+1; got != want {
		t.Fatalf("fence after reopen = %d, want %d (fence counters must survive a restart)", got, want)
	}
	wantInfo(t, "LookupKey(held) after reopen", lookupKey(t, st2, "held"), "held", held)
	if r, err := st2.Acquire(ctx(t), "held", time.Second); err != nil || r.OK {
		t.Fatalf("Acquire(held) after reopen = %+v, %v; want OK=false", r, err)
	}
	if !release(t, st2, held.LockID) {
		t.Fatal("Release(held) after reopen: OK=false; the lockId index must survive a restart")
	}
}

// fenceOverflow: a counter at FenceMax refuses to issue more with Internal
// and writes nothing: the key stays free and the counter is unchanged.
func (s *suite) fenceOverflow(t *caseT) {
	st, ns := s.freshConsecutive(t)
	const key = "overflow"
	s.setFence(t, st, ns, key, lockstore.FenceMax)
	r, err := st.Acquire(ctx(t), key, 10*time.Second)
	if err == nil {
		t.Fatalf("Acquire past FenceMax = %+v, want an Internal error", r)
	}
	wantCode(t, "Acquire past FenceMax", err, lockstore.Internal)
	if r.OK {
		t.Errorf("Acquire past FenceMax returned OK=true alongside the error")
	}
	wantFree(t, st, key, "")
	if ks := inspect(t, st, key); ks.LatestFence != fence(t, lockstore.FenceMax) {
		t.Errorf("LatestFence after the overflow = %q, want the unchanged counter %q", ks.LatestFence, fence(t, lockstore.FenceMax))
	}

	// The last fence is still issuable: the overflow check is "> FenceMax".
	s.setFence(t, st, ns, key, lockstore.FenceMax-1)
	last := acquire(t, st, key, 10*time.Second)
	if last.Fence != fence(t, lockstore.FenceMax) {
		t.Fatalf("Acquire at FenceMax-1 issued %q, want %q", last.Fence, fence(t, lockstore.FenceMax))
	}
	// Other keys are unaffected.
	if other := acquire(t, st, "other", time.Second); other.Fence != fence(t, 1) {
		t.Errorf("other key's first fence = %q, want %q", other.Fence, fence(t, 1))
	}
}

// fenceWarnLevel: fences past FenceWarn are still issued (the backend only
// logs); the count continues from a seeded value.
func (s *suite) fenceWarnLevel(t *caseT) {
	st, ns := s.freshConsecutive(t)
	const key = "warn"
	s.setFence(t, st, ns, key, lockstore.FenceWarn)
	r := acquire(t, st, key, time.Second)
	if r.Fence != fence(t, lockstore.FenceWarn+1) {
		t.Fatalf("Acquire after SetFence(FenceWarn) issued %q, want %q", r.Fence, fence(t, lockstore.FenceWarn+1))
	}
}
