package storetest

// The write barrier under concurrency: admissions racing a handover and contended
// acquires.

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// barrierRaceHandover: writers under fence F keep asking while the lock
// changes hands to F+1 and the new holder's writers ask too. Writes under F
// never finish during the race, so a store that ever admits both fences
// let F+1 in while an F write was in flight. Afterwards, finishing the F
// writes lets F+1 in.
func (s *suite) barrierRaceHandover(t *caseT) {
	st, _ := s.freshConsecutive(t)
	rounds := max(2, int(4*s.scale))
	const older, newer = 4, 2
	attempts := max(10, int(50*s.scale))
	for round := range rounds {
		key := fmt.Sprintf("race-%d", round)
		a := acquire(t, st, key, time.Minute)
		f1 := fence(t, fenceNum(t, a.Fence)+1)

		var (
			wg        sync.WaitGroup
			start     = make(chan struct{})
			handedOff = make(chan struct{})
			errs      = make(chan string, older+newer+1)
			mu        sync.Mutex
			olderIDs  []string
			newerIn   atomic.Int64
		)
		for range older {
			wg.Go(func() {
				<-start
				for range attempts {
					r, id, err := admitFresh(t.Context(), st, key, a.Fence, true)
					if err != nil {
						errs <- fmt.Sprintf("Admit(older): %v", err)
						return
					}
					if r.Admitted {
						mu.Lock()
						olderIDs = append(olderIDs, id)
						mu.Unlock()
						continue
					}
					if r.Blocking != 0 {
						errs <- fmt.Sprintf("Admit(older) blocked by %d entries; nothing older than F exists", r.Blocking)
					}
					return // the handover happened: F is stale from now on
				}
			})
		}
		wg.Go(func() {
			defer close(handedOff)
			<-start
			if rel, err := st.Release(t.Context(), a.LockID); err != nil || !rel.OK {
				errs <- fmt.Sprintf("Release during the race = %+v, %v", rel, err)
				return
			}
			if r, err := st.Acquire(t.Context(), key, time.Minute); err != nil || !r.OK || r.Fence != f1 {
				errs <- fmt.Sprintf("Acquire during the race = OK=%v fence %s, %v; want fence %s", r.OK, r.Fence, err, f1)
			}
		})
		for range newer {
			wg.Go(func() {
				<-handedOff
				for range attempts {
					r, _, err := admitFresh(t.Context(), st, key, f1, true)
					if err != nil {
						errs <- fmt.Sprintf("Admit(newer): %v", err)
						return
					}
					if r.Admitted {
						newerIn.Add(1)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for m := range errs {
			t.Errorf("round %d: %s", round, m)
		}
		if n := newerIn.Load(); n > 0 && len(olderIDs) > 0 {
			t.Fatalf("round %d: %d writes under the newer fence were admitted while %d writes under the older fence were in flight",
				round, n, len(olderIDs))
		}
		t.Logf("round %d: %d older admitted, %d newer admitted", round, len(olderIDs), newerIn.Load())
		for _, id := range olderIDs {
			finish(t, st, key, id)
		}
		wantAdmitted(t, fmt.Sprintf("round %d: Admit(newer) after the older writes finished", round),
			admit(t, st, key, adm(t, f1, true, time.Minute)))
	}
}

// barrierAcquireKeepsEntries: writes admitted while the lock changes hands
// (and while other callers contend for it) are all still there afterwards:
// the new fence is blocked by exactly as many entries as were admitted.
func (s *suite) barrierAcquireKeepsEntries(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "keep"
	const writers = 6
	a := acquire(t, st, key, time.Minute)
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		admitted atomic.Int64
		errs     = make(chan string, writers+4)
	)
	for range writers {
		wg.Go(func() {
			<-start
			r, _, err := admitFresh(t.Context(), st, key, a.Fence, false)
			if err != nil {
				errs <- fmt.Sprintf("Admit: %v", err)
				return
			}
			if r.Admitted {
				admitted.Add(1)
			}
		})
	}
	for range 3 {
		wg.Go(func() { // contenders: refused while the lock is held
			<-start
			if _, err := st.Acquire(t.Context(), "keep-other", time.Minute); err != nil {
				errs <- fmt.Sprintf("Acquire(other key): %v", err)
			}
			if _, err := st.Acquire(t.Context(), key, time.Minute); err != nil {
				errs <- fmt.Sprintf("Acquire(contended): %v", err)
			}
		})
	}
	wg.Go(func() {
		<-start
		if rel, err := st.Release(t.Context(), a.LockID); err != nil || !rel.OK {
			errs <- fmt.Sprintf("Release = %+v, %v", rel, err)
			return
		}
		// A contender may win the key between the release and this acquire;
		// the entries must survive whoever holds it.
		for range 50 {
			r, err := st.Acquire(t.Context(), key, time.Minute)
			if err != nil {
				errs <- fmt.Sprintf("Acquire: %v", err)
				return
			}
			if r.OK {
				return
			}
			runtime.Gosched()
		}
	})
	close(start)
	wg.Wait()
	close(errs)
	for m := range errs {
		t.Errorf("%s", m)
	}
	latest := inspect(t, st, key).LatestFence
	if latest <= a.Fence {
		t.Fatalf("LatestFence after the handover = %q, want above %s", latest, a.Fence)
	}
	n := int(admitted.Load())
	r := admit(t, st, key, adm(t, latest, false, time.Minute))
	if n == 0 {
		wantAdmitted(t, "Admit(newer fence), no older write admitted", r)
		return
	}
	wantRefused(t, fmt.Sprintf("Admit(newer fence) after %d older writes were admitted around acquires", n), r, n)
}
