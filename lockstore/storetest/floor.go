package storetest

import (
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// The clock floor (backend.FloorClock, every backend's default): an
// acquire issues max(counter+1, FenceFloorAt(store now)), at most
// FloorLeadMax ahead of the floor. The suite's clock is this process's; the
// stores' clocks are on this machine (or trail it by ExtraClockMargin).

// floorBounds is the range a fence issued between the test-clock instants
// before and after may fall in under the floor, for a key whose counter
// did not lead the floor.
func (s *suite) floorBounds(before, after int64) (lo, hi int64) {
	return backend.FenceFloorAt(before - s.margin), backend.FenceFloorAt(after+s.margin) + backend.FloorLeadMax
}

// fenceFloor: a fresh key's first fence, and an old counter's next one,
// are the store clock's floor; fences still strictly increase within a
// millisecond (the floor does not advance, the counter does).
func (s *suite) fenceFloor(t *caseT) {
	st, ns := s.fresh(t)
	for _, c := range []struct {
		key  string
		seed int64 // 0: a fresh key
	}{{"fresh", 0}, {"old-counter", 41}} {
		if c.seed > 0 {
			s.setFence(t, st, ns, c.key, c.seed)
		}
		before := t.nowMs()
		r := acquire(t, st, c.key, 10*time.Second)
		after := t.nowMs()
		lo, hi := s.floorBounds(before, after)
		if n := fenceNum(t, r.Fence); n < lo || n > hi {
			t.Errorf("%s: fence %d outside the clock floor's [%d, %d]", c.key, n, lo, hi)
		}
		if ks := inspect(t, st, c.key); ks.LatestFence != r.Fence {
			t.Errorf("%s: LatestFence = %q, want the issued %q (the counter is written back)", c.key, ks.LatestFence, r.Fence)
		}
		release(t, st, r.LockID)
	}
	// A burst on one key: every fence above the last, whatever the clock.
	var prev int64
	for i := range 20 {
		r := acquire(t, st, "burst", 10*time.Second)
		n := fenceNum(t, r.Fence)
		if n <= prev {
			t.Fatalf("burst acquire #%d: fence %d after %d", i, n, prev)
		}
		prev = n
		release(t, st, r.LockID)
	}
}

// fenceFloorSurvivesLostWrites plays a store that lost acknowledged writes
// (a failover to a lagging replica, a restart without persistence, a
// restored backup): the counter goes back to an older value, or vanishes.
// The next fence must still be above every fence issued before the loss.
func (s *suite) fenceFloorSurvivesLostWrites(t *caseT) {
	st, ns := s.fresh(t)
	for _, c := range []struct {
		key     string
		lostTo  int64 // what the counter reverts to; 0: as if never written
		holding bool  // the lost writes include a live lock
	}{{"reverted", 3, false}, {"vanished", 0, false}, {"reverted-held", 3, true}} {
		var issued []int64
		for range 3 {
			r := acquire(t, st, c.key, 10*time.Second)
			issued = append(issued, fenceNum(t, r.Fence))
			release(t, st, r.LockID)
		}
		if c.holding {
			r := acquire(t, st, c.key, 200*time.Millisecond)
			issued = append(issued, fenceNum(t, r.Fence))
			// The lock is lost with the counter: it expires here, as a
			// promoted replica that never saw it would not have it.
			t.sleep(time.Duration(200+lockstore.TimeToleranceMs+s.margin) * time.Millisecond)
		}
		s.setFence(t, st, ns, c.key, c.lostTo)
		// A failover takes longer than this; a millisecond is what the
		// floor needs to have moved past the last lost fence.
		t.sleep(5 * time.Millisecond)
		r := acquire(t, st, c.key, 10*time.Second)
		n := fenceNum(t, r.Fence)
		for _, f := range issued {
			if n <= f {
				t.Errorf("%s: after the counter went back to %d the store issued %d, not above the earlier fence %d (fences %v)",
					c.key, c.lostTo, n, f, issued)
				break
			}
		}
		release(t, st, r.LockID)
	}
}

// fenceFloorLeadCap: a counter more than FloorLeadMax ahead of the floor
// (the store clock stepped back, or a failover promoted a server whose
// clock is behind) is refused with ServiceUnavailable and nothing is
// written; an overflowing counter is still Internal.
func (s *suite) fenceFloorLeadCap(t *caseT) {
	st, ns := s.fresh(t)
	const key = "ahead"
	ahead := backend.FenceFloorAt(t.nowMs()+s.margin) + 10*backend.FloorLeadMax
	s.setFence(t, st, ns, key, ahead)
	r, err := st.Acquire(ctx(t), key, 10*time.Second)
	wantCode(t, "Acquire of a counter 10 s ahead of the floor", err, lockstore.ServiceUnavailable)
	if r.OK {
		t.Errorf("Acquire ahead of the floor returned OK=true")
	}
	wantFree(t, st, key, "")
	if ks := inspect(t, st, key); ks.LatestFence != fence(t, ahead) {
		t.Errorf("LatestFence after the refusal = %q, want the unchanged counter %q", ks.LatestFence, fence(t, ahead))
	}

	// Within the cap the acquire goes through, one above the counter.
	const near = "near"
	within := backend.FenceFloorAt(t.nowMs()) + backend.FloorLeadMax/2
	s.setFence(t, st, ns, near, within)
	if got := acquire(t, st, near, time.Second); fenceNum(t, got.Fence) != within+1 {
		t.Errorf("Acquire of a counter half the cap ahead issued %s, want %d", got.Fence, within+1)
	}

	s.setFence(t, st, ns, "overflow", lockstore.FenceMax)
	_, err = st.Acquire(ctx(t), "overflow", 10*time.Second)
	wantCode(t, "Acquire past FenceMax under the floor", err, lockstore.Internal)
}
