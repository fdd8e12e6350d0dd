package redis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkListHeld measures the console's listing (a bounded SCAN of the
// lockId index keys plus two MGETs per page) on a Redis holding 100,000
// live locks taken with the real acquire script (so 300,000 keys: lock,
// index and fence counter per lock), and on a sparse prefix whose 10 locks
// sit among those 300,000 keys (the walk then ends at its page bound).
//
//	scripts/testenv go test -run '^$' -bench ListHeld -benchtime 20x ./lockstore/redis/
func BenchmarkListHeld(b *testing.B) {
	const locks = 100_000
	ctx := context.Background()
	s := openPrefix(b, "syncguard_benchlist")
	b.Cleanup(func() { dropPrefix(b, s.Client(), s.Prefix()) })
	seed(b, s, locks, "k")
	sparse := openPrefix(b, "syncguard_benchsparse")
	b.Cleanup(func() { dropPrefix(b, sparse.Client(), sparse.Prefix()) })
	seed(b, sparse, 10, "s")
	dbsize, _ := s.Client().DBSize(ctx).Result()
	b.Logf("database holds %d keys", dbsize)

	for _, c := range []struct {
		name  string
		s     *Store
		limit int
	}{
		{"100k-locks/limit-200", s, 200},
		{"100k-locks/limit-1000", s, 1000},
		{"10-locks-among-300k-keys/limit-200", sparse, 200},
	} {
		b.Run(c.name, func(b *testing.B) {
			var n int
			var partial bool
			for b.Loop() {
				l, err := c.s.ListHeld(ctx, c.limit)
				if err != nil {
					b.Fatal(err)
				}
				n, partial = len(l.Locks), l.Partial
			}
			b.ReportMetric(float64(n), "locks/op")
			b.Logf("%s: %d locks listed, partial=%v", c.name, n, partial)
		})
	}
}

// seed takes n locks of an hour with the store's own acquire, 16 at a time.
func seed(b *testing.B, s *Store, n int, prefix string) {
	b.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				r, err := s.Acquire(context.Background(), fmt.Sprintf("%s/%d", prefix, i), time.Hour)
				if err != nil || !r.OK {
					errs <- fmt.Errorf("acquire %d: %+v %v", i, r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("seeded %d locks in %v", n, time.Since(start).Round(time.Millisecond))
}
