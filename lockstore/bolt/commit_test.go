package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
)

// TestGroupCommitIsolatesFailures queues three writers behind a blocked
// leader so they share one wave, makes the middle one fail after a partial
// write, and checks that the other two still commit and the failed one
// leaves nothing behind.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "gc.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bucket := []byte("b")
	if err := db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket(bucket); return err }); err != nil {
		t.Fatal(err)
	}
	g := &groupCommit{db: db}
	put := func(k string) func(*bbolt.Tx) error {
		return func(tx *bbolt.Tx) error { return tx.Bucket(bucket).Put([]byte(k), []byte("v")) }
	}
	boom := errors.New("boom")

	started, gate := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	errs := make(map[string]error)
	var mu sync.Mutex
	run := func(name string, fn func(*bbolt.Tx) error) {
		wg.Go(func() {
			err := g.update(fn)
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	run("leader", func(tx *bbolt.Tx) error {
		close(started)
		<-gate
		return put("leader")(tx)
	})
	<-started
	run("b", put("b"))
	run("c", func(tx *bbolt.Tx) error {
		if err := put("c")(tx); err != nil {
			return err
		}
		return boom
	})
	run("d", put("d"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		n := len(g.queue)
		g.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d writers queued behind the leader", n)
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()

	for name, want := range map[string]error{"leader": nil, "b": nil, "c": boom, "d": nil} {
		if !errors.Is(errs[name], want) || (want == nil && errs[name] != nil) {
			t.Errorf("writer %s: err %v, want %v", name, errs[name], want)
		}
	}
	if err := db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, k := range []string{"leader", "b", "d"} {
			if b.Get([]byte(k)) == nil {
				t.Errorf("%s's write was lost", k)
			}
		}
		if b.Get([]byte("c")) != nil {
			t.Error("the failed writer's partial write was committed")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if g.running || len(g.queue) != 0 {
		t.Errorf("group commit not idle afterwards: running=%v queue=%d", g.running, len(g.queue))
	}
}

// TestGroupCommitSurvivesPanic: a panicking mutation fails its caller with
// Internal and the next writer still gets through.
func TestGroupCommitSurvivesPanic(t *testing.T) {
	s, _ := openFake(t, Config{})
	err := s.writes.update(func(*bbolt.Tx) error { panic("bug") })
	if lockstore.CodeOf(err) != lockstore.Internal {
		t.Fatalf("panicking mutation: %v, want Internal", err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Acquire(context.Background(), "k", time.Second); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("writes stalled after a panicking mutation")
	}
}

// TestCancelWhileQueued: an acquire whose context is cancelled while it
// waits behind another writer returns Aborted and writes nothing.
func TestCancelWhileQueued(t *testing.T) {
	s, _ := openFake(t, Config{})
	started, gate := make(chan struct{}), make(chan struct{})
	leaderDone := make(chan error, 1)
	go func() {
		leaderDone <- s.writes.update(func(*bbolt.Tx) error {
			close(started)
			<-gate
			return nil
		})
	}()
	<-started
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan error, 1)
	go func() { _, err := s.Acquire(ctx, "queued", time.Second); res <- err }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.writes.mu.Lock()
		n := len(s.writes.queue)
		s.writes.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("acquire never queued")
		}
	}
	cancel()
	close(gate)
	if err := <-leaderDone; err != nil {
		t.Fatal(err)
	}
	if err := <-res; lockstore.CodeOf(err) != lockstore.Aborted {
		t.Fatalf("queued acquire after cancel: %v, want Aborted", err)
	}
	ks, err := s.Inspect(t.Context(), "queued")
	if err != nil || ks.Live != nil || ks.LatestFence != "" {
		t.Fatalf("Inspect after the cancelled acquire = %+v, %v; want nothing written", ks, err)
	}
}
