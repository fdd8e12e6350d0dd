package redis

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lockstore"
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

// BenchmarkStoreCPU measures what each operation costs in CPU, the Redis
// server's (used_cpu_user+used_cpu_sys of INFO cpu, whose single thread is
// the bottleneck at 16 workers) and this process's, per call, with 16
// workers on one key each. Inspect reads a held key, so its lock value is
// decoded on both sides.
//
//	scripts/testenv go test -run '^$' -bench StoreCPU -benchtime 3s ./lockstore/redis/
func BenchmarkStoreCPU(b *testing.B) {
	s := openPrefix(b, "syncguard_benchcpu")
	b.Cleanup(func() { dropPrefix(b, s.Client(), s.Prefix()) })
	ctx := context.Background()
	const workers = 16
	par := max(1, workers/runtime.GOMAXPROCS(0))

	run := func(b *testing.B, prep func(key string) error, op func(key string) error) {
		var n atomic.Int64
		b.SetParallelism(par)
		keys := make(chan string, 64)
		go func() {
			for i := range 64 {
				keys <- "cpu-" + b.Name() + "-" + strconv.Itoa(i)
			}
		}()
		if prep != nil {
			for i := range 64 {
				if err := prep("cpu-" + b.Name() + "-" + strconv.Itoa(i)); err != nil {
					b.Fatal(err)
				}
			}
		}
		proc0, redis0 := processCPU(), redisCPU(ctx, s.Client())
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			key := <-keys
			for pb.Next() {
				n.Add(1)
				if err := op(key); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		calls := float64(n.Load())
		b.ReportMetric(float64(processCPU()-proc0)/1e3/calls, "proc-us/op")
		b.ReportMetric(float64(redisCPU(ctx, s.Client())-redis0)/1e3/calls, "redis-us/op")
	}

	b.Run("acquire-release", func(b *testing.B) {
		run(b, nil, func(key string) error { return cycle(ctx, s, key) })
	})
	b.Run("inspect-held", func(b *testing.B) {
		prep := func(key string) error {
			r, err := s.Acquire(ctx, key, time.Hour) // held from an earlier round: fine
			if err != nil || (!r.OK && r.Reason != lockstore.ReasonLocked) {
				return fmt.Errorf("Acquire = %+v, %v", r, err)
			}
			return nil
		}
		run(b, prep, func(key string) error {
			ks, err := s.Inspect(ctx, key)
			if err != nil || ks.Live == nil {
				return fmt.Errorf("Inspect = %+v, %v", ks, err)
			}
			return nil
		})
	})
	b.Run("floor-ping", func(b *testing.B) {
		run(b, nil, func(string) error { return s.Client().Ping(ctx).Err() })
	})
}

// processCPU is this process's CPU time (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the server's CPU time from INFO cpu.
func redisCPU(ctx context.Context, c *goredis.Client) time.Duration {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
