package storetest

import (
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// extendReplacesTTL: extend sets expiry to now+ttl — it does not add to
// the old TTL nor keep the later of the two — and the lock then expires on
// the new schedule, long before the original one.
func (s *suite) extendReplacesTTL(t *caseT) {
	st, _ := s.fresh(t)
	const key = "shrink"
	r := acquire(t, st, key, 10*time.Second)
	acquiredAt := lookupKey(t, st, key).AcquiredAtMs

	before := t.nowMs()
	e := extend(t, st, r.LockID, 2*time.Second)
	after := t.nowMs()
	if !e.OK {
		t.Fatalf("Extend: OK=false Detail=%q", e.Detail)
	}
	checkExpiry(t, "Extend(2s)", e.ExpiresAtMs, before, after, 2*time.Second)
	if e.ExpiresAtMs > r.ExpiresAtMs-7000 {
		t.Fatalf("Extend(2s) after Acquire(10s): expiresAtMs %d is not ~8s before %d; extend must replace the TTL",
			e.ExpiresAtMs, r.ExpiresAtMs)
	}
	li := lookupKey(t, st, key)
	if li == nil || li.ExpiresAtMs != e.ExpiresAtMs {
		t.Fatalf("LookupKey after Extend = %+v, want expiresAtMs = Extend's %d", li, e.ExpiresAtMs)
	}
	if li.AcquiredAtMs != acquiredAt {
		t.Errorf("Extend changed acquiredAtMs from %d to %d", acquiredAt, li.AcquiredAtMs)
	}
	if li.Fence != r.Fence {
		t.Errorf("Extend changed the fence from %s to %s", r.Fence, li.Fence)
	}

	t.sleepUntil(s.freeAt(e.ExpiresAtMs))
	wantFree(t, st, key, r.LockID)
	if release(t, st, r.LockID) {
		t.Error("Release after the shortened lock expired: OK=true")
	}
}

// noResurrection: extending an expired lock fails and leaves the key free;
// the next acquire continues the fence sequence (counted one by one, under
// backend.FloorOff).
func (s *suite) noResurrection(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "lazarus"
	r := acquire(t, st, key, 100*time.Millisecond)
	t.sleepUntil(s.freeAt(r.ExpiresAtMs))

	if e := extend(t, st, r.LockID, 10*time.Second); e.OK {
		t.Fatalf("Extend of an expired lock = OK (expiresAtMs %d); expired locks must not be resurrected", e.ExpiresAtMs)
	}
	wantFree(t, st, key, r.LockID)
	if release(t, st, r.LockID) {
		t.Error("Release of an expired lock: OK=true")
	}
	r2 := acquire(t, st, key, time.Second)
	if got, want := fenceNum(t, r2.Fence), fenceNum(t, r.Fence)+1; got != want {
		t.Errorf("fence after expiry = %d, want %d", got, want)
	}
}

// expiryTolerance: liveness is expiresAt > now - 1000 ms. A 200 ms lock is
// still held ~600 ms after it was taken and gone once expiresAt+1000 (plus
// a margin) has passed. If the machine is too loaded to probe inside the
// window, the attempt is repeated with a fresh key rather than judged.
func (s *suite) expiryTolerance(t *caseT) {
	st, _ := s.fresh(t)
	for attempt := range 3 {
		key := "tolerance-" + string(rune('a'+attempt))
		r := acquire(t, st, key, 200*time.Millisecond)
		// Everything probed must finish before the tolerance ends by our
		// clock; 100 ms covers millisecond rounding between clocks.
		deadline := r.ExpiresAtMs + lockstore.TimeToleranceMs - 100
		t.sleepUntil(r.ExpiresAtMs + 400)
		locked := isLocked(t, st, key)
		byKey := lookupKey(t, st, key)
		byID := lookupID(t, st, r.LockID)
		ks := inspect(t, st, key)
		if t.nowMs() >= deadline {
			t.Logf("attempt %d: probes finished after the tolerance window; retrying", attempt)
			continue
		}
		if !locked {
			t.Fatal("IsLocked = false within expiresAt+1000ms; the tolerance must keep it live")
		}
		wantInfo(t, "LookupKey within tolerance", byKey, key, r)
		wantInfo(t, "LookupLockID within tolerance", byID, key, r)
		if ks.Live == nil || ks.Live.LockID != r.LockID {
			t.Fatalf("Inspect.Live within tolerance = %+v, want the lock", ks.Live)
		}

		t.sleepUntil(s.freeAt(r.ExpiresAtMs))
		wantFree(t, st, key, r.LockID)
		if ks := inspect(t, st, key); ks.LatestFence != r.Fence {
			t.Errorf("Inspect.LatestFence after expiry = %q, want %q", ks.LatestFence, r.Fence)
		}
		return
	}
	t.Fatal("could not probe inside the tolerance window in 3 attempts; the machine is too loaded")
}
