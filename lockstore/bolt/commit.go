package bolt

import (
	"sync"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
)

// groupCommit shares one durable bbolt commit among concurrent mutations.
//
// Each bbolt commit costs an fsync (~1.5 ms here), and bbolt admits one
// writer at a time, so one transaction per mutation caps the store at a
// few hundred writes a second. bbolt's own Batch groups writers but makes
// every caller wait out a timer first, doubling a lone caller's latency.
// Here the first writer to arrive commits at once; writers that arrive
// while a commit is in flight queue up and the next leader commits them
// all in one transaction. A lone writer pays one commit, a crowd pays one
// commit per wave.
//
// Each mutation still runs whole inside one transaction and sees the
// writes of those before it in the same wave (they run one after another),
// and its caller returns only after that transaction is durable. A
// mutation may run more than once (see runWave), so it must reset its
// results at its start.
type groupCommit struct {
	db *bbolt.DB

	mu      sync.Mutex
	queue   []*mutation
	running bool // a leader is committing or about to
}

type mutation struct {
	fn   func(*bbolt.Tx) error
	done chan outcome // buffered 1
}

// outcome tells a waiting writer either its result or that it now leads.
type outcome struct {
	err  error
	lead bool
}

// update runs fn in a durable read-write transaction, possibly shared with
// other writers, and returns fn's error or the commit's.
func (g *groupCommit) update(fn func(*bbolt.Tx) error) error {
	m := &mutation{fn: fn, done: make(chan outcome, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, m)
	if g.running {
		g.mu.Unlock()
		o := <-m.done
		if !o.lead {
			return o.err
		}
	} else {
		g.running = true
		g.mu.Unlock()
	}

	// This writer leads: commit everything queued so far (its own
	// mutation included), then hand leadership to the oldest writer that
	// queued meanwhile, so no caller is kept committing for others.
	g.mu.Lock()
	wave := g.queue
	g.queue = nil
	g.mu.Unlock()
	g.runWave(wave)

	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].done <- outcome{lead: true}
	} else {
		g.running = false
	}
	g.mu.Unlock()
	return (<-m.done).err
}

// safe runs a mutation, turning a panic into an error: a panic escaping a
// leader would leave the queue without one and stall every later write.
func safe(fn func(*bbolt.Tx) error, tx *bbolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = lockstore.Errorf(lockstore.Internal, "commit", "bolt: panic in a write transaction: %v", p)
		}
	}()
	return fn(tx)
}

// solo commits one mutation in its own transaction.
func (g *groupCommit) solo(fn func(*bbolt.Tx) error) error {
	return g.db.Update(func(tx *bbolt.Tx) error { return safe(fn, tx) })
}

// runWave commits a wave in one transaction. If any mutation fails, the
// transaction rolls back (a failed mutation may have written half its
// changes) and every mutation of the wave is retried in a transaction of
// its own, so one caller's failure never becomes another's.
func (g *groupCommit) runWave(wave []*mutation) {
	if len(wave) == 1 {
		wave[0].done <- outcome{err: g.solo(wave[0].fn)}
		return
	}
	failed := false
	err := g.db.Update(func(tx *bbolt.Tx) error {
		for _, m := range wave {
			if err := safe(m.fn, tx); err != nil {
				failed = true
				return err
			}
		}
		return nil
	})
	if failed {
		for _, m := range wave {
			m.done <- outcome{err: g.solo(m.fn)}
		}
		return
	}
	for _, m := range wave {
		m.done <- outcome{err: err}
	}
}
