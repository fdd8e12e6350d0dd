package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/bolt"
)

// heldLocks is how many locks the memory benchmark holds at once.
var heldLocks = flag.Int("held-locks", 100_000, "locks held at once by BenchmarkHeldLockMemory")

// memResult is what holding heldLocks locks cost a store.
type memResult struct {
	Locks int
	// StoreBytes is the store's own growth per lock: bolt's file size,
	// Redis's used_memory (lock value, lockId index and fence counter).
	StoreBytes float64
	// RSSBytes is this process's resident set growth per lock (bolt only:
	// the store is embedded, so this is the gateway's own memory, the
	// file's mapped pages included).
	RSSBytes float64
	Elapsed  time.Duration
}

var memBoard = struct {
	sync.Mutex
	m map[string]memResult
}{m: map[string]memResult{}}

// BenchmarkHeldLockMemory: memory per held lock, measured by acquiring
// -held-locks locks (100,000 by default) with TTLs that outlive the run and
// comparing the store's size before and after — bolt's file bytes and the
// gateway's RSS, Redis's used_memory. The measurement runs once per store;
// the framework's later, larger b.N calls only repeat the figures.
func BenchmarkHeldLockMemory(b *testing.B) {
	for _, st := range []struct {
		name    string
		measure func(b testing.TB, n int) memResult
	}{
		{"bolt", measureBoltMemory},
		{"redis", measureRedisMemory},
	} {
		b.Run(st.name, func(b *testing.B) {
			id := "memory/" + st.name
			memBoard.Lock()
			r, done := memBoard.m[id]
			memBoard.Unlock()
			if !done {
				r = st.measure(b, *heldLocks)
				memBoard.Lock()
				memBoard.m[id] = r
				memBoard.Unlock()
			}
			b.ReportMetric(r.StoreBytes, "store-B/lock")
			if r.RSSBytes != 0 {
				b.ReportMetric(r.RSSBytes, "rss-B/lock")
			}
		})
	}
}

// holdLocks acquires n distinct keys from the worker pool, TTL heldTTL,
// and leaves them held.
func holdLocks(ctx context.Context, s lockstore.Store, name string, n int) (time.Duration, error) {
	var i int64
	var mu sync.Mutex
	next := func() (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		i++
		return i, i <= int64(n)
	}
	smp, err := measureN(ctx, *workers, n, func(ctx context.Context, _ int) error {
		k, ok := next()
		if !ok {
			return nil
		}
		a, err := s.Acquire(ctx, fmt.Sprintf("bench/mem/%s/%d", name, k), heldTTL)
		if err != nil {
			return err
		}
		if !a.OK {
			return fmt.Errorf("acquire: not acquired (%s) on a fresh key", a.Reason)
		}
		return nil
	})
	return smp.elapsed, err
}

func measureBoltMemory(b testing.TB, n int) memResult {
	path := filepath.Join(b.TempDir(), "memory.db")
	s, err := bolt.Open(b.Context(), bolt.Config{Path: path, Logger: logger})
	if err != nil {
		b.Fatalf("open bolt store: %v", err)
	}
	defer s.Close()
	fileBefore, rssBefore := fileSize(b, path), rss()
	el, err := holdLocks(b.Context(), s, "bolt", n)
	if err != nil {
		b.Fatalf("hold %d locks: %v", n, err)
	}
	runtime.GC()
	return memResult{
		Locks:      n,
		StoreBytes: float64(fileSize(b, path)-fileBefore) / float64(n),
		RSSBytes:   float64(rss()-rssBefore) / float64(n),
		Elapsed:    el,
	}
}

func measureRedisMemory(b testing.TB, n int) memResult {
	s := openRedis(b)
	used := func() int64 {
		info, err := s.Client().Info(b.Context(), "memory").Result()
		if err != nil {
			b.Fatalf("INFO memory: %v", err)
		}
		v, err := infoField(info, "used_memory")
		if err != nil {
			b.Fatal(err)
		}
		return int64(v)
	}
	before := used()
	el, err := holdLocks(b.Context(), s, "redis", n)
	if err != nil {
		b.Fatalf("hold %d locks: %v", n, err)
	}
	return memResult{Locks: n, StoreBytes: float64(used()-before) / float64(n), Elapsed: el}
}

func fileSize(tb testing.TB, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size()
}

// rss is this process's resident set size in bytes (0 if unknown).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
