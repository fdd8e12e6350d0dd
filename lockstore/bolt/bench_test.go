package bolt

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(b.Context(), Config{Path: filepath.Join(b.TempDir(), "bench.db")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkAcquireRelease: one caller, one acquire+release cycle per op —
// the latency a lone client sees (two durable commits).
func BenchmarkAcquireRelease(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	for b.Loop() {
		r, err := s.Acquire(ctx, "bench", 10*time.Second)
		if err != nil || !r.OK {
			b.Fatalf("%+v %v", r, err)
		}
		if _, err := s.Release(ctx, r.LockID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireReleaseParallel: many callers on distinct keys — the
// write throughput under load.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	var id atomic.Int64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("bench-%d", id.Add(1))
		for pb.Next() {
			r, err := s.Acquire(ctx, key, 10*time.Second)
			if err != nil || !r.OK {
				b.Errorf("%+v %v", r, err)
				return
			}
			if _, err := s.Release(ctx, r.LockID); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkInspect: the edge check's read.
func BenchmarkInspect(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	if _, err := s.Acquire(ctx, "bench", time.Hour); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Inspect(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}
