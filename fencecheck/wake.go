package fencecheck

import (
	"hash/maphash"
	"sync"
)

// keyWake wakes, at once, the barrier writes of this process waiting on a
// key when a write on that key finishes here (Finish, or an entry taken
// back). Writes finished by another gateway are not seen here: the waiters
// re-check the store on a short capped backoff for those.
//
// Keys are hashed (maphash): two keys sharing a hash only wake each
// other's waiters for nothing, which costs one store call. The map holds an
// entry only while some write waits on its key, so it never has more
// entries than there are waiters, which Options.BarrierMaxWaiters bounds.
type keyWake struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[uint64]*wakeEntry
}

// wakeEntry is one key's wake-up: ch is closed when a write on the key
// finishes; n counts the waiters holding it.
type wakeEntry struct {
	ch chan struct{}
	n  int
}

func newKeyWake() *keyWake {
	return &keyWake{seed: maphash.MakeSeed(), m: map[uint64]*wakeEntry{}}
}

func (w *keyWake) hash(key string) uint64 { return maphash.String(w.seed, key) }

// subscribe returns the key's current wake-up. Take it before the store
// call whose answer the waiter then sleeps on: a write finishing after that
// call read the store closes this channel, so no wake-up is lost.
func (w *keyWake) subscribe(key string) *wakeEntry {
	h := w.hash(key)
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[h]
	if e == nil {
		e = &wakeEntry{ch: make(chan struct{})}
		w.m[h] = e
	}
	e.n++
	return e
}

// release gives back a wake-up subscribe returned; the last waiter of an
// entry not yet woken removes it.
func (w *keyWake) release(key string, e *wakeEntry) {
	h := w.hash(key)
	w.mu.Lock()
	defer w.mu.Unlock()
	e.n--
	if e.n == 0 && w.m[h] == e {
		delete(w.m, h)
	}
}

// wake wakes every write waiting on key; the next subscriber gets a fresh
// channel. A key nobody waits on costs one map lookup.
func (w *keyWake) wake(key string) {
	h := w.hash(key)
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[h]; e != nil {
		close(e.ch)
		delete(w.m, h)
	}
}

// woken reports whether e's channel is closed.
func (e *wakeEntry) woken() bool {
	select {
	case <-e.ch:
		return true
	default:
		return false
	}
}

// size is the number of keys with waiters (tests).
func (w *keyWake) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}
