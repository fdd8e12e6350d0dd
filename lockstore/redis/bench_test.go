package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAcquireRelease measures one acquire+release cycle (two EVALSHA
// round trips) against REDIS_URL, on one key per goroutine.
//
//	REDIS_URL=redis://127.0.0.1:PORT/0 go test -run '^$' -bench AcquireRelease ./lockstore/redis/
func BenchmarkAcquireRelease(b *testing.B) {
	s := openPrefix(b, "syncguard_bench")
	b.Cleanup(func() { dropPrefix(b, s.Client(), s.Prefix()) })
	ctx := context.Background()

	// The floor: two bare round trips on the same client, which is what an
	// acquire+release cycle costs before any script work.
	b.Run("floor-two-pings", func(b *testing.B) {
		for b.Loop() {
			if err := s.Client().Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			if err := s.Client().Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := cycle(ctx, s, "bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			key := "bench-" + strconv.FormatInt(n.Add(1), 10)
			for pb.Next() {
				if err := cycle(ctx, s, key); err != nil {
					b.Error(err) // not Fatal: this is not the benchmark's goroutine
					return
				}
			}
		})
	})
}

func cycle(ctx context.Context, s *Store, key string) error {
	r, err := s.Acquire(ctx, key, 10*time.Second)
	if err != nil || !r.OK {
		return fmt.Errorf("Acquire = %+v, %v", r, err)
	}
	if rel, err := s.Release(ctx, r.LockID); err != nil || !rel.OK {
		return fmt.Errorf("Release = %+v, %v", rel, err)
	}
	return nil
}
