package bolt

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// TestConformance runs the shared suite; each namespace is its own file in
// one temporary directory, so reopening a namespace reopens its file.
func TestConformance(t *testing.T) {
	storetest.Run(t, harness(t, func(s *Store) lockstore.Store { return s }))
}

// harness opens bolt stores for the suite, each passed through wrap.
func harness(t *testing.T, wrap func(*Store) lockstore.Store) storetest.Harness {
	return harnessQuery(t, "", wrap)
}

// harnessQuery is harness with stores opened from a store URL with this
// query (as the serve command opens them).
func harnessQuery(t *testing.T, query string, wrap func(*Store) lockstore.Store) storetest.Harness {
	dir := t.TempDir()
	config := func(t *testing.T, ns string) Config {
		u := url.URL{Scheme: "bolt", Path: filepath.Join(dir, ns+".db"), RawQuery: query}
		cfg, err := ParseURL(u.String())
		if err != nil {
			t.Fatalf("ParseURL(%s): %v", u.String(), err)
		}
		cfg.Logger = slog.New(slog.DiscardHandler)
		return cfg
	}
	return storetest.Harness{
		Open: func(t *testing.T, ns string, o storetest.Options) (lockstore.Store, error) {
			cfg := config(t, ns)
			cfg.FenceFloor, cfg.AuditRetention = o.FenceFloor, o.AuditRetention
			s, err := Open(t.Context(), cfg)
			if err != nil {
				return nil, err
			}
			if o.Now != nil {
				s.now = o.Now
			}
			return wrap(s), nil
		},
		SetFence: func(t *testing.T, s lockstore.Store, ns, key string, n int64) {
			if w, ok := s.(interface{ base() *Store }); ok {
				s = w.base()
			}
			if err := s.(*Store).setFence(key, n); err != nil {
				t.Fatalf("setFence: %v", err)
			}
		},
	}
}

// mutantEnv names the broken store a child run of
// TestSuiteCatchesBrokenStores puts under the suite.
const mutantEnv = "FENCEGATE_STORETEST_MUTANT"

// mutants are deliberately broken wrappers of the bolt store, each
// violating one safety property, with the conformance case that covers it.
var mutants = []struct {
	name    string
	catches string // the storetest case that must fail
	wrap    func(*Store) lockstore.Store
}{
	{"fence_repeats", "fence_sequence", func(s *Store) lockstore.Store {
		return &repeatingFence{wrapped: wrapped{s}, first: map[string]string{}}
	}},
	{"release_ignores_lockid", "foreign_lockids", func(s *Store) lockstore.Store {
		return &keyRelease{wrapped: wrapped{s}}
	}},
	{"extend_adds", "extend_replaces_ttl", func(s *Store) lockstore.Store {
		return &addingExtend{wrapped{s}}
	}},
	{"lookup_leaks_key", "lookup_sanitised", func(s *Store) lockstore.Store {
		return &leakyLookup{wrapped{s}}
	}},
	{"expiry_without_tolerance", "expiry_tolerance", func(s *Store) lockstore.Store {
		return &noTolerance{wrapped{s}}
	}},
	{"list_leaks_lockid", "list_held", func(s *Store) lockstore.Store {
		return &leakyList{wrapped{s}}
	}},
	{"list_ignores_limit", "list_held", func(s *Store) lockstore.Store {
		return &unboundedList{wrapped{s}}
	}},
	{"inspect_drops_key", "inspect", func(s *Store) lockstore.Store {
		return &keylessInspect{wrapped{s}}
	}},
}

// TestSuiteCatchesBrokenStores proves the conformance suite can fail: for
// each mutant it runs this test binary again with only the case that covers
// the broken property selected, the suite pointed at the mutant, and
// asserts that exactly that case reported a failure. A control run of the
// same cases on the unbroken store must pass, so the failures come from the
// mutations, not from the harness.
//
// In the child (mutantEnv set) this same test is the suite's host: it runs
// storetest.Run against the named mutant ("none" is the unbroken store).
func TestSuiteCatchesBrokenStores(t *testing.T) {
	if name, ok := os.LookupEnv(mutantEnv); ok {
		wrap, found := func(s *Store) lockstore.Store { return s }, name == "none"
		for _, m := range mutants {
			if m.name == name {
				wrap, found = m.wrap, true
			}
		}
		if !found {
			t.Fatalf("%s=%q names no mutant", mutantEnv, name)
		}
		storetest.Run(t, harness(t, wrap))
		return
	}

	t.Run("control", func(t *testing.T) {
		t.Parallel()
		var cases []string
		for _, m := range mutants {
			cases = append(cases, m.catches)
		}
		out, err := runSuiteChild(t, "none", cases)
		if err != nil {
			t.Fatalf("the unbroken store failed the cases the mutants are checked with (%v):\n%s", err, out)
		}
		for _, c := range cases {
			if !strings.Contains(out, "--- PASS: "+caseName(c)+" ") {
				t.Errorf("control run did not report %s as passed:\n%s", c, out)
			}
		}
	})
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			out, err := runSuiteChild(t, m.name, []string{m.catches})
			if err == nil {
				t.Fatalf("the suite passed a store whose %s; case %s should have caught it:\n%s", m.name, m.catches, out)
			}
			if !strings.Contains(out, "--- FAIL: "+caseName(m.catches)+" ") {
				t.Fatalf("the suite failed (%v), but not in case %s:\n%s", err, m.catches, out)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, ".go:") {
					t.Logf("caught: %s", strings.TrimSpace(line))
				}
			}
		})
	}
}

// caseName is the full test name of conformance case c in a child run.
func caseName(c string) string {
	return "TestSuiteCatchesBrokenStores/conformance/" + c
}

// runSuiteChild runs the suite's named cases against mutant in a child
// process of this test binary and returns its verbose output.
func runSuiteChild(t *testing.T, mutant string, cases []string) (string, error) {
	t.Helper()
	quoted := make([]string, len(cases))
	for i, c := range cases {
		quoted[i] = regexp.QuoteMeta(c)
	}
	run := fmt.Sprintf("^TestSuiteCatchesBrokenStores$/^conformance$/^(%s)$", strings.Join(quoted, "|"))
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+run, "-test.v", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), mutantEnv+"="+mutant)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// wrapped is the unbroken store under a mutant; base lets the harness
// reach it to seed fence counters.
type wrapped struct{ *Store }

func (w wrapped) base() *Store { return w.Store }

// repeatingFence hands out every key's first fence again on later
// acquires.
type repeatingFence struct {
	wrapped
	mu    sync.Mutex
	first map[string]string
}

func (m *repeatingFence) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	r, err := m.Store.Acquire(ctx, key, ttl)
	if err != nil || !r.OK {
		return r, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.first[key]; ok {
		r.Fence = f
	} else {
		m.first[key] = r.Fence
	}
	return r, nil
}

// keyRelease releases the lock on the key last acquired through it,
// whatever lockId it is given: release by key instead of by owner.
type keyRelease struct {
	wrapped
	mu      sync.Mutex
	lastKey string
}

func (m *keyRelease) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	r, err := m.Store.Acquire(ctx, key, ttl)
	if err == nil && r.OK {
		m.mu.Lock()
		m.lastKey = key
		m.mu.Unlock()
	}
	return r, err
}

func (m *keyRelease) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	m.mu.Lock()
	key := m.lastKey
	m.mu.Unlock()
	if key != "" {
		if ks, err := m.Store.Inspect(ctx, key); err == nil && ks.Live != nil {
			lockID = ks.Live.LockID
		}
	}
	return m.Store.Release(ctx, lockID)
}

// addingExtend adds ttl to the remaining time instead of replacing it.
type addingExtend struct{ wrapped }

func (m *addingExtend) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	if li, err := m.Store.LookupLockID(ctx, lockID); err == nil && li != nil {
		if left := time.Duration(li.ExpiresAtMs-m.nowMs()) * time.Millisecond; left > 0 {
			ttl += left
		}
	}
	return m.Store.Extend(ctx, lockID, ttl)
}

// leakyLookup puts the raw key where its hash belongs.
type leakyLookup struct{ wrapped }

// leakyList lists the holder's raw lockId where its hash belongs.
type leakyList struct{ wrapped }

func (m *leakyList) ListHeld(ctx context.Context, limit int) (lockstore.LockList, error) {
	l, err := m.Store.ListHeld(ctx, limit)
	for i := range l.Locks {
		_ = m.view(ctx, "list", func(tx *bbolt.Tx) error {
			r, err := m.getLock(tx, l.Locks[i].Key)
			if r != nil {
				l.Locks[i].LockIDHash = r.LockID
			}
			return err
		})
	}
	return l, err
}

// unboundedList ignores the limit it was asked for.
type unboundedList struct{ wrapped }

// keylessInspect reads a live lock without saying whose key it is (the
// Lock is not the one description of the lock then).
type keylessInspect struct{ wrapped }

func (m *keylessInspect) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	ks, err := m.Store.Inspect(ctx, key)
	if ks.Live != nil {
		l := *ks.Live
		l.Key = ""
		ks.Live = &l
	}
	return ks, err
}

func (m *unboundedList) ListHeld(ctx context.Context, _ int) (lockstore.LockList, error) {
	return m.Store.ListHeld(ctx, lockstore.MaxListLimit)
}

func (m *leakyLookup) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	li, err := m.Store.LookupKey(ctx, key)
	if li != nil {
		li.KeyHash = key
	}
	return li, err
}

// noTolerance reports a lock as gone at its expiresAt, dropping the
// 1000 ms tolerance of the liveness predicate, on every read path.
type noTolerance struct{ wrapped }

// expired is the broken predicate, by the store's clock.
func (m *noTolerance) expired(expiresAtMs int64) bool { return expiresAtMs <= m.nowMs() }

func (m *noTolerance) IsLocked(ctx context.Context, key string) (bool, error) {
	li, err := m.LookupKey(ctx, key)
	return li != nil, err
}

func (m *noTolerance) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	li, err := m.Store.LookupKey(ctx, key)
	if li != nil && m.expired(li.ExpiresAtMs) {
		li = nil
	}
	return li, err
}

func (m *noTolerance) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	li, err := m.Store.LookupLockID(ctx, lockID)
	if li != nil && m.expired(li.ExpiresAtMs) {
		li = nil
	}
	return li, err
}

func (m *noTolerance) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	ks, err := m.Store.Inspect(ctx, key)
	if ks.Live != nil && m.expired(ks.Live.ExpiresAtMs) {
		ks.Live = nil
	}
	return ks, err
}
