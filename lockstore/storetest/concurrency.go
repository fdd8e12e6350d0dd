package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Full-strength shape of the concurrency case.
const (
	stressWorkers = 32
	stressCycles  = 200
	stressKeys    = 4
)

// concurrency hammers a few keys from many goroutines. Mutual exclusion is
// checked with a per-key occupancy counter that must never exceed one, and
// fencing by recording each fence the moment its holder enters the
// critical section: per key, the recorded sequence must be strictly
// increasing, which also makes every fence unique. It runs on the default
// store (the clock floor on), as gateways do; under backend.FloorOff the
// sequence must also be dense, and stress/concurrency_floor_off checks that.
func (s *suite) concurrency(t *caseT) {
	st, _ := s.fresh(t)
	s.stress(t, st, false)
}

// concurrencyFloorOff is concurrency under backend.FloorOff, where a
// refused acquire that consumed a fence shows as a gap.
func (s *suite) concurrencyFloorOff(t *caseT) {
	st, _ := s.freshConsecutive(t)
	s.stress(t, st, true)
}
func (s *suite) stress(t *caseT, st lockstore.Store, dense bool) {
	cycles := max(5, int(float64(stressCycles)*s.scale))
	// A TTL far beyond any plausible hold time, so no lock expires under a
	// holder and the exclusion check is about the store, not the clock.
	const ttl = 30 * time.Second

	type keyState struct {
		inside atomic.Int32
		mu     sync.Mutex
		fences []int64
	}
	keys := make([]string, stressKeys)
	states := make([]*keyState, stressKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("stress-%d", i)
		states[i] = &keyState{}
	}

	var (
		wg        sync.WaitGroup
		overlaps  atomic.Int64
		failures  = make(chan string, stressWorkers)
		start     = time.Now()
		attempted atomic.Int64
	)
	for w := range stressWorkers {
		wg.Go(func() {
			for c := range cycles {
				k := (w + c) % stressKeys
				ks := states[k]
				attempted.Add(1)
				r, err := st.Acquire(t.Context(), keys[k], ttl)
				if err != nil {
					failures <- fmt.Sprintf("worker %d: Acquire: %v", w, err)
					return
				}
				if !r.OK {
					if r.Reason != lockstore.ReasonLocked {
						failures <- fmt.Sprintf("worker %d: Acquire OK=false Reason=%q", w, r.Reason)
						return
					}
					continue
				}
				if ks.inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				n, err := lockstore.ParseFence(r.Fence)
				if err != nil {
					failures <- fmt.Sprintf("worker %d: %v", w, err)
					return
				}
				ks.mu.Lock()
				ks.fences = append(ks.fences, n)
				ks.mu.Unlock()
				ks.inside.Add(-1)

				rel, err := st.Release(t.Context(), r.LockID)
				if err != nil {
					failures <- fmt.Sprintf("worker %d: Release: %v", w, err)
					return
				}
				if !rel.OK {
					failures <- fmt.Sprintf("worker %d: Release of a held lock OK=false", w)
					return
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d times two holders were inside one key's critical section", n)
	}
	total := 0
	for i, ks := range states {
		total += len(ks.fences)
		if len(ks.fences) == 0 {
			t.Errorf("key %d: no acquire ever succeeded", i)
			continue
		}
		for j := 1; j < len(ks.fences); j++ {
			if ks.fences[j] <= ks.fences[j-1] {
				t.Errorf("key %d: fence #%d = %d not above #%d = %d (hand-out order)", i, j, ks.fences[j], j-1, ks.fences[j-1])
				break
			}
		}
		// Refused acquires consume no fence, so without the floor the
		// sequence is dense.
		if first, last := ks.fences[0], ks.fences[len(ks.fences)-1]; dense && last-first+1 != int64(len(ks.fences)) {
			t.Errorf("key %d: %d fences span %d..%d; fences were skipped", i, len(ks.fences), first, last)
		}
	}
	t.Logf("%d workers × %d cycles on %d keys: %d attempts, %d acquired, %s",
		stressWorkers, cycles, stressKeys, attempted.Load(), total, time.Since(start).Round(time.Millisecond))
}
