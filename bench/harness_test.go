package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// workers is the size of the fixed client pool every benchmark runs. A fixed
// pool (rather than b.RunParallel, whose goroutine count follows GOMAXPROCS)
// offers the floor and the subject exactly the same concurrency on any
// machine, and lets each worker own its keys so lock contention never enters
// the numbers.
var workers = flag.Int("workers", 16, "concurrent clients in every benchmark's fixed worker pool")

// rounds repeats each suite's subjects in turn (floor, subject, floor,
// subject, …). Unlike -count, which repeats one sub-benchmark back to back,
// this keeps every round's subject next to its own floor, so a burst of load
// from the rest of the machine lands on one round's pair, not on one side of
// every pair.
var rounds = flag.Int("rounds", 3, "rounds of each suite, subjects interleaved with their baselines")

// An op is one measured operation (an acquire+release cycle, one ext_authz
// Check). Worker w calls it sequentially and only with its own w, so an op
// may keep per-worker state indexed by w without locking.
type op func(ctx context.Context, w int) error

// A subject is one measured thing: a scoreboard id ("gateway/redis/http"),
// the unit its throughput is reported in, and its op. redis, when set, is
// the Redis the op uses: its server's CPU time is measured with the run.
type subject struct {
	id    string
	unit  string
	op    op
	redis *goredis.Client
	// server, if set, lists the processes that serve the op (children of
	// the bench process): their CPU time is measured with the run, as the
	// server's CPU per op, apart from the clients' (this process's).
	server func() []int
	// meter, if set, is started right before each measured run; what it
	// returns is called with the run's number of calls right after, and
	// gives the run's extra metrics (report.go's section.extras).
	meter func() func(n int) map[string]float64
}

// A suite sets up the subjects of one comparison for nw workers, floor or
// peer first, and registers their teardown on tb. The benchmarks and the
// smoke test share the suites, so `go test` without -bench proves that every
// benchmark's setup works.
type suite func(tb testing.TB, nw int) []subject

// sample is one timed run of an op: n calls over elapsed wall time, with
// every call's latency, sorted.
type sample struct {
	n       int
	elapsed time.Duration
	lat     []time.Duration
}

// measureN calls o n times in total from a pool of nw goroutines, each taking
// the next call from a shared counter until n are claimed. It returns the
// wall time of the whole pool and every call's latency. The first failing
// call stops the pool and is returned.
func measureN(ctx context.Context, nw, n int, o op) (sample, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	lats := make([][]time.Duration, nw)
	start := time.Now()
	for w := range nw {
		wg.Go(func() {
			per := make([]time.Duration, 0, n/nw+1)
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				t0 := time.Now()
				if err := o(ctx, w); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("worker %d: %w", w, err) })
					cancel()
					break
				}
				per = append(per, time.Since(t0))
			}
			lats[w] = per
		})
	}
	wg.Wait()
	s := sample{n: n, elapsed: time.Since(start), lat: slices.Concat(lats...)}
	slices.Sort(s.lat)
	return s, firstErr
}

// perSec is the pool's throughput: calls per second of wall time.
func (s sample) perSec() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.n) / s.elapsed.Seconds()
}

// pct is the nearest-rank percentile p (0 < p <= 100) of the latencies.
func (s sample) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	// Nearest rank: the smallest value with at least p% of the samples at
	// or below it.
	rank := int(float64(len(s.lat))*p/100 + 0.999999999)
	return s.lat[min(max(rank, 1), len(s.lat))-1]
}

func (s sample) result() result {
	return result{PerSec: s.perSec(), P50: s.pct(50), P99: s.pct(99), P999: s.pct(99.9), N: s.n}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// runSuite sets the suite up once (outside any timing) and measures each
// subject as a sub-benchmark named after its id, in order, so a subject and
// its floor run back to back, -rounds times. Each sub-benchmark's final run
// goes on the scoreboard for the report TestMain prints.
func runSuite(b *testing.B, s suite) {
	nw := *workers
	if nw < 1 || *rounds < 1 {
		b.Fatalf("-workers=%d -rounds=%d: want at least 1 of each", nw, *rounds)
	}
	subs := s(b, nw)
	for range *rounds {
		for _, sub := range subs {
			// A name run again gets the framework's "#01" suffix.
			b.Run(subName(sub.id), func(b *testing.B) {
				b.ReportAllocs()
				var stop func(int) map[string]float64
				if sub.meter != nil {
					stop = sub.meter()
				}
				cpu := startCPU(b, sub.redis, sub.server)
				b.ResetTimer()
				smp, err := measureN(b.Context(), nw, b.N, sub.op)
				b.StopTimer()
				if err != nil {
					b.Fatalf("%s: %v", sub.id, err)
				}
				var extra map[string]float64
				if stop != nil {
					extra = stop(smp.n)
				}
				report(b, sub, smp, cpu, extra)
			})
			// b.Run returns once the sub-benchmark is done with every b.N
			// it tried; what set saw last is the run it reported.
			board.commit(sub.id)
		}
	}
}

// subName is the sub-benchmark name of a scoreboard id: the id without its
// first element, which the Benchmark function's name already says.
func subName(id string) string {
	for i := range len(id) {
		if id[i] == '/' {
			return id[i+1:]
		}
	}
	return id
}

// report puts one run's figures on the benchmark line and the scoreboard.
func report(b *testing.B, sub subject, smp sample, cpu cpuMeter, extra map[string]float64) {
	r := smp.result()
	r.CPU, r.ServerCPU, r.StoreCPU = cpu.perOp(b, smp.n)
	r.Extra = extra
	b.ReportMetric(smp.perSec(), sub.unit)
	b.ReportMetric(micros(r.P50), "p50-µs")
	b.ReportMetric(micros(r.P99), "p99-µs")
	if sub.server != nil {
		// The server runs apart from the clients: its CPU is its own.
		b.ReportMetric(micros(r.ServerCPU), "server-cpu-µs/op")
		b.ReportMetric(micros(r.CPU), "client-cpu-µs/op")
	} else {
		b.ReportMetric(micros(r.CPU), "cpu-µs/op")
	}
	if sub.redis != nil {
		b.ReportMetric(micros(r.StoreCPU), "redis-cpu-µs/op")
	}
	if sub.server != nil && sub.redis != nil {
		b.ReportMetric(micros(r.ServerCPU+r.StoreCPU), "server+redis-cpu-µs/op")
	}
	for k, v := range extra {
		b.ReportMetric(v, k)
	}
	board.set(sub.id, r)
}

// openRate and openFor shape the open-loop benchmarks: calls are started
// at a fixed rate whatever the answers' latency, as independent clients
// (Envoy's many downstream requests) send them.
var (
	openRate = flag.Int("open-rate", 2000, "calls per second of the open-loop benchmarks")
	openFor  = flag.Duration("open-for", 5*time.Second, "duration of each open-loop run (at least -benchtime)")
)

// maxOutstanding bounds the calls an open-loop run has in flight; past it
// the subject cannot keep up with the rate and the run fails rather than
// queue without bound.
const maxOutstanding = 4096

// measureOpen starts rate calls per second for d, each on its own
// goroutine as worker i%nw (the op must allow concurrent calls with one w).
// A call's latency runs from the moment it was due, not from when it was
// started, so a subject or a scheduler that falls behind is charged for
// the wait (no coordinated omission). The first failing call is returned.
func measureOpen(ctx context.Context, nw, rate int, d time.Duration, o op) (sample, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	var (
		wg          sync.WaitGroup
		errOnce     sync.Once
		firstErr    error
		outstanding atomic.Int64
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		cancel()
	}
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		if outstanding.Add(1) > maxOutstanding {
			fail(fmt.Errorf("more than %d calls outstanding at %d/s: the subject cannot keep up", maxOutstanding, rate))
			break
		}
		wg.Go(func() {
			defer outstanding.Add(-1)
			if err := o(ctx, i%nw); err != nil {
				fail(fmt.Errorf("call %d: %w", i, err))
				return
			}
			lat[i] = time.Since(due)
		})
	}
	wg.Wait()
	s := sample{n: n, elapsed: time.Since(start), lat: lat}
	slices.Sort(s.lat)
	return s, firstErr
}

// runOpenSuite is runSuite for open-loop subjects: each run starts
// -open-rate calls per second for -open-for (or -benchtime, if longer)
// and ignores b.N, so the framework's first run is the only one.
func runOpenSuite(b *testing.B, s suite) {
	nw := *workers
	d := *openFor
	if f := flag.Lookup("test.benchtime"); f != nil {
		if bt, err := time.ParseDuration(f.Value.String()); err == nil && bt > d {
			d = bt
		}
	}
	if nw < 1 || *rounds < 1 || *openRate < 1 || d <= 0 {
		b.Fatalf("-workers=%d -rounds=%d -open-rate=%d -open-for=%v: want positive values", nw, *rounds, *openRate, d)
	}
	subs := s(b, nw)
	for range *rounds {
		for _, sub := range subs {
			b.Run(subName(sub.id), func(b *testing.B) {
				b.ReportAllocs()
				cpu := startCPU(b, sub.redis, sub.server)
				b.ResetTimer()
				smp, err := measureOpen(b.Context(), nw, *openRate, d, sub.op)
				b.StopTimer()
				if err != nil {
					b.Fatalf("%s: %v", sub.id, err)
				}
				b.ReportMetric(micros(smp.pct(99.9)), "p999-µs")
				report(b, sub, smp, cpu, nil)
			})
			board.commit(sub.id)
		}
	}
}
