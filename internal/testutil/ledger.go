package testutil

import "sync"

// WriteLedger is a protected resource's record of the fenced writes it
// gets, for tests of the barrier: per key, the writes in flight by fence,
// counting overlaps (a write arriving while one under another fence is in
// flight on its key) and backward commits (a commit under a fence lower
// than one already committed; fences are fixed-width digit strings, so
// they compare as strings). The zero value is ready; it is safe for
// concurrent use.
type WriteLedger struct {
	mu                  sync.Mutex
	inflight            map[string]map[string]int // key → fence → writes in flight
	committed           map[string]string         // key → highest fence committed
	overlaps, backwards int64
}

// Begin records a write under fence arriving on key; end commits it.
func (l *WriteLedger) Begin(key, fence string) (end func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for f, n := range l.inflight[key] {
		if f != fence && n > 0 {
			l.overlaps++
		}
	}
	if l.inflight == nil {
		l.inflight, l.committed = map[string]map[string]int{}, map[string]string{}
	}
	if l.inflight[key] == nil {
		l.inflight[key] = map[string]int{}
	}
	l.inflight[key][fence]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.inflight[key][fence]--
		if fence < l.committed[key] {
			l.backwards++
		} else {
			l.committed[key] = fence
		}
	}
}

// Counts are the overlaps and backward commits so far.
func (l *WriteLedger) Counts() (overlaps, backwards int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.overlaps, l.backwards
}
