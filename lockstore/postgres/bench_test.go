package postgres

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAcquireRelease measures one acquire+release cycle (two round
// trips) against DATABASE_URL: "serial" is the latency of one caller,
// "parallel" the throughput of GOMAXPROCS callers on distinct keys.
//
//	go test -run '^$' -bench AcquireRelease ./lockstore/postgres/
func BenchmarkAcquireRelease(b *testing.B) {
	s := openNS(b, testNS(b))
	defer s.Close()

	b.Run("serial", func(b *testing.B) {
		ctx := b.Context()
		for b.Loop() {
			r, err := s.Acquire(ctx, "bench", time.Minute)
			if err != nil || !r.OK {
				b.Fatalf("Acquire = %+v, %v", r, err)
			}
			if rr, err := s.Release(ctx, r.LockID); err != nil || !rr.OK {
				b.Fatalf("Release = %+v, %v", rr, err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		ctx := b.Context()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			key := "bench-" + strconv.FormatInt(next.Add(1), 10)
			for pb.Next() {
				r, err := s.Acquire(ctx, key, time.Minute)
				if err != nil || !r.OK {
					b.Errorf("Acquire = %+v, %v", r, err)
					return
				}
				if rr, err := s.Release(ctx, r.LockID); err != nil || !rr.OK {
					b.Errorf("Release = %+v, %v", rr, err)
					return
				}
			}
		})
	})
}
