package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/fencegate/fencegate/fencewire"
)

// TestSuites sets up every benchmark exactly as the benchmarks do and runs a
// few ops of each subject through the same worker pool, so a plain `go test`
// (which never runs benchmarks) still proves each setup works and each op
// succeeds. It needs REDIS_URL like the benchmarks.
func TestSuites(t *testing.T) {
	const nw, n = 2, 6
	for _, tc := range []struct {
		name  string
		suite suite
		ids   []string
	}{
		{"gateway", gatewaySuite, []string{
			"gateway/bolt/in-process", "gateway/bolt/http", "gateway/bolt/grpc",
			"gateway/redis/in-process", "gateway/transport/http", "gateway/redis/lua-floor", "gateway/redis/http", "gateway/transport/grpc", "gateway/redis/grpc",
			"gateway/postgres/in-process", "gateway/postgres/http", "gateway/postgres/grpc",
		}},
		{"authz", authzSuite, []string{"authz/noop", "authz/fencegate-redis"}},
		{"authz-open", authzOpenSuite, []string{"authz-open/noop", "authz-open/fencegate-redis"}},
		{"peer", peerSuite, []string{"peer/redislock", "peer/fencegate-redis"}},
		{"floor", floorSuite, []string{"floor/bolt/off", "floor/bolt/clock", "floor/redis/off", "floor/redis/clock", "floor/postgres/off", "floor/postgres/clock"}},
		{"proxy", proxySuite, []string{"proxy/floor", "proxy/fencegate", "proxy/fencegate-barrier", "proxy/nginx-forward-auth"}},
		{"cluster", clusterSuite, []string{"cluster/one-node", "cluster/one-master", "cluster/three-masters", "cluster/authz-one-node", "cluster/authz-three-masters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			subs := tc.suite(t, nw)
			var ids []string
			for _, s := range subs {
				ids = append(ids, s.id)
				var stop func(int) map[string]float64
				if s.meter != nil {
					stop = s.meter()
				}
				cpu := startCPU(t, s.redis, s.server)
				smp, err := measureN(t.Context(), nw, n, s.op)
				if err != nil {
					t.Fatalf("%s: %v", s.id, err)
				}
				// The meters read (a server process that cannot be read
				// fails the test); their values are not asserted.
				if proc, server, store := cpu.perOp(t, smp.n); proc < 0 || server < 0 || store < 0 {
					t.Errorf("%s: negative CPU per op: process %v, server %v, Redis %v", s.id, proc, server, store)
				}
				if stop != nil {
					// Other packages' tests share Redis under `make test`:
					// the values are not asserted, only that they exist.
					ex := stop(smp.n)
					for _, k := range []string{extraCPU, extraCalls} {
						if v, ok := ex[k]; !ok || v < 0 {
							t.Errorf("%s: extra metric %s = %v (present %v)", s.id, k, v, ok)
						}
					}
				}
				if smp.n != n || len(smp.lat) != n || smp.elapsed <= 0 {
					t.Errorf("%s: sample n=%d latencies=%d elapsed=%v, want %d calls timed", s.id, smp.n, len(smp.lat), smp.elapsed, n)
				}
			}
			// The report's sections name these ids; a renamed subject
			// would silently drop out of the table.
			if strings.Join(ids, ",") != strings.Join(tc.ids, ",") {
				t.Errorf("subjects %v, want %v", ids, tc.ids)
			}
		})
	}
}

// TestAuthzBenchChecksTheFence guards what the ext_authz benchmark measures:
// the `fencegate serve` child allows its request because the fence it
// carries is current, not because the server lets writes through — once the
// key has moved on to a newer fence, the same request is denied stale. The
// no-op floor, a server that does let every write through, fails that
// assertion: the test tells the two apart.
func TestAuthzBenchChecksTheFence(t *testing.T) {
	store := openRedis(t)
	key := workerKeys("authz", 1)[0]
	reqs, held := heldWrites(t, store, 1)
	fence := reqs[0].GetAttributes().GetRequest().GetHttp().GetHeaders()[fencewire.HeaderToken]
	fg := authv3.NewAuthorizationClient(dialGRPC(t, startFencegateServe(t, store).addr["authz"]))
	noop := authv3.NewAuthorizationClient(dialGRPC(t, startNoopAuthz(t).addr["authz"]))

	resp, err := fg.Check(t.Context(), reqs[0])
	if err != nil || resp.GetStatus().GetCode() != int32(code.Code_OK) {
		t.Fatalf("current fence: %v %v", resp, err)
	}
	var verified string
	for _, h := range resp.GetOkResponse().GetHeaders() {
		if h.GetHeader().GetKey() == fencewire.HeaderVerified {
			verified = h.GetHeader().GetValue()
		}
	}
	if verified != fence {
		t.Errorf("%s = %q, want the checked fence %s", fencewire.HeaderVerified, verified, fence)
	}

	// Move the key on to a newer fence: release the held lock and take
	// the key again.
	if r, err := store.Release(t.Context(), held[0].LockID); err != nil || !r.OK {
		t.Fatalf("release: %+v %v", r, err)
	}
	again, err := store.Acquire(t.Context(), key, lockTTL)
	if err != nil || !again.OK || again.Fence <= fence {
		t.Fatalf("re-acquire: %+v %v (old fence %s)", again, err, fence)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		_, _ = store.Release(ctx, again.LockID)
	})
	staleDenied := func(c authv3.AuthorizationClient) error {
		resp, err := c.Check(t.Context(), reqs[0])
		if err != nil {
			return err
		}
		if got := resp.GetStatus().GetCode(); got != int32(code.Code_PERMISSION_DENIED) || !strings.Contains(resp.GetDeniedResponse().GetBody(), "stale") {
			return fmt.Errorf("stale fence: code %d body %q, want PERMISSION_DENIED stale", got, resp.GetDeniedResponse().GetBody())
		}
		return nil
	}
	if err := staleDenied(fg); err != nil {
		t.Errorf("fencegate serve: %v", err)
	}
	if err := staleDenied(noop); err == nil {
		t.Errorf("the no-op floor passed the stale-fence assertion: it cannot tell a checking server from one that allows everything")
	}
}

// errTest is a sentinel for the pool tests.
var errTest = errors.New("boom")

func TestMeasureN(t *testing.T) {
	t.Run("every call once", func(t *testing.T) {
		var calls [3]int
		smp, err := measureN(t.Context(), 3, 100, func(_ context.Context, w int) error {
			calls[w]++ // each worker touches only its own slot
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := calls[0] + calls[1] + calls[2]; got != 100 || len(smp.lat) != 100 {
			t.Errorf("calls %v (sum %d), latencies %d; want 100", calls, got, len(smp.lat))
		}
	})
	t.Run("first error stops the pool", func(t *testing.T) {
		smp, err := measureN(t.Context(), 2, 1000, func(ctx context.Context, w int) error {
			if w == 1 {
				return errTest
			}
			time.Sleep(time.Millisecond)
			return ctx.Err()
		})
		if !errors.Is(err, errTest) {
			t.Fatalf("err %v, want %v", err, errTest)
		}
		if len(smp.lat) >= 1000 {
			t.Errorf("%d calls completed after a failure", len(smp.lat))
		}
	})
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name string
		lat  []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 1..100", ms(hundred...), 50, 50 * time.Millisecond},
		{"p99 of 1..100", ms(hundred...), 99, 99 * time.Millisecond},
		{"p100 of 1..100", ms(hundred...), 100, 100 * time.Millisecond},
		{"p50 of four", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of four", ms(1, 2, 3, 4), 99, 4 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (sample{lat: tc.lat}).pct(tc.p); got != tc.want {
				t.Errorf("pct(%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestScoreboardKeepsFinalRuns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls [][]int // b.N of each call, per sub-benchmark (b.Run)
		want  []int   // b.N of the runs kept
	}{
		{"one round calibrating", [][]int{{1, 20, 100}}, []int{100}},
		{"-count 2: rounds inside one b.Run", [][]int{{1, 20, 100, 1, 300}}, []int{100, 300}},
		{"-benchtime 1x -count 3", [][]int{{1, 1, 1}}, []int{1, 1, 1}},
		{"-rounds 2: two b.Runs", [][]int{{1, 50}, {1, 70}}, []int{50, 70}},
		{"filtered out", [][]int{{}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s scoreboard
			for _, run := range tc.calls {
				for _, n := range run {
					s.set("x", result{N: n})
				}
				s.commit("x")
			}
			var got []int
			for _, r := range s.snapshot()["x"] {
				got = append(got, r.N)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("kept runs with b.N %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRender(t *testing.T) {
	us := func(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }
	runs := map[string][]result{
		// In-process subjects: CPU is this process's. The transport floor
		// is divided by the Redis store in-process; fencegate over HTTP
		// by both (0.40 and, to the floor, 0.50) and by the Lua floor (0.25).
		"gateway/redis/in-process": {{PerSec: 10000, P50: us(100), P99: us(200), CPU: us(80), StoreCPU: us(30)}},
		"gateway/transport/http":   {{PerSec: 8000, P50: us(120), P99: us(250), CPU: us(60)}},
		"gateway/redis/lua-floor":  {{PerSec: 16000, P50: us(60), P99: us(120), CPU: us(40), StoreCPU: us(20)}},
		"gateway/redis/http":       {{PerSec: 4000, P50: us(300), P99: us(600), CPU: us(150), StoreCPU: us(30)}},
		// Three rounds; the load changes between rounds, the per-round
		// ratio does not: 0.5, 0.5, 0.4. Servers in child processes:
		// ServerCPU and Redis count, the clients' CPU does not.
		"authz/noop": {
			{PerSec: 10000, P50: us(100), P99: us(400), P999: us(900), CPU: us(99), ServerCPU: us(30)},
			{PerSec: 4000, P50: us(300), P99: us(900), P999: us(900), CPU: us(99), ServerCPU: us(30)},
			{PerSec: 10000, P50: us(100), P99: us(400), P999: us(900), CPU: us(99), ServerCPU: us(30)},
		},
		// Server 50 µs + Redis 20 µs = 70 µs, over the 60 µs target, and
		// +40 µs against the floor's 30 µs + an idle Redis.
		"authz/fencegate-redis": {
			{PerSec: 5000, P50: us(250), P99: us(1200), P999: us(2000), CPU: us(99), ServerCPU: us(50), StoreCPU: us(20)},
			{PerSec: 2000, P50: us(600), P99: us(1800), P999: us(2000), CPU: us(99), ServerCPU: us(50), StoreCPU: us(20)},
			{PerSec: 4000, P50: us(200), P99: us(800), P999: us(2000), CPU: us(99), ServerCPU: us(50), StoreCPU: us(20)},
		},
		"peer/fencegate-redis": {{PerSec: 100, P50: us(1), P99: us(2)}},
		// extra metrics: medians over the runs, absolute
		"proxy/floor": {{PerSec: 1000, P50: us(10), P99: us(20), Extra: map[string]float64{extraCPU: 50, extraCalls: 0}}},
		"proxy/fencegate-barrier": {
			{PerSec: 500, P50: us(20), P99: us(40), Extra: map[string]float64{extraCPU: 90, extraCalls: 2}},
			{PerSec: 500, P50: us(20), P99: us(40), Extra: map[string]float64{extraCPU: 110, extraCalls: 2}},
		},
	}
	var sb strings.Builder
	render(&sb, runInfo{Commit: "abc1234", Command: "go test -bench ."}, runs)
	out := sb.String()
	for _, want := range []string{
		"| added CPU µs/op | cycles/s ÷ bare transport | cycles/s ÷ Lua floor | runs |",
		"| gateway/redis/in-process | 10000 | 100 | 200 | 0 | 80 | 30 | gateway/redis/in-process | 1.00 | 1.00 | 1.00 | +0 | +0 | — | — | 1 |",
		"| gateway/transport/http | 8000 | 120 | 250 | 0 | 60 | — | gateway/redis/in-process | 0.80 | 1.20 | 1.25 | +20 | -50 | — | — | 1 |",
		"| gateway/redis/lua-floor | 16000 | 60 | 120 | 0 | 40 | 20 | gateway/redis/in-process | 1.60 | 0.60 | 0.60 | -40 | -50 | — | — | 1 |",
		"| gateway/redis/http | 4000 | 300 | 600 | 0 | 150 | 30 | gateway/redis/in-process | 0.40 | 3.00 | 3.00 | +200 | +70 | 0.50 | 0.25 | 1 |",
		"| server CPU µs/op | Redis CPU µs/op | server+Redis CPU µs/op | CPU target µs/op | baseline |",
		"| authz/noop | 10000 | 100 | 400 | 900 | 30 | — | 30 | — | authz/noop | 1.00 (1.00–1.00) | 1.00 (1.00–1.00) | 1.00 | +0 | +0 | 1.00 (1.00–1.00) | 3 |",
		// medians: 4000/s, 250 µs, 1200 µs; ratios per round
		// 0.5/0.5/0.4, p50 2.5/2/2, p99 3/2/2; added p50 150/300/100.
		"| authz/fencegate-redis | 4000 | 250 | 1200 | 2000 | 50 | 20 | 70 | ≤ 60: missed | authz/noop | 0.50 (0.40–0.50) | 2.00 (2.00–2.50) | 2.00 | +150 | +40 | 1.67 (1.67–1.67) | 3 |",
		// the peer is missing: absolute numbers, no ratios
		"| peer/fencegate-redis | 100 | 1 | 2 | 0 | 0 | — | peer/redislock | — | — | — | — | — | 1 |",
		"`go test -bench .`",
		"| runs | cpu-µs/req | redis-calls/req |",
		"| proxy/fencegate-barrier | 500 | 20 | 40 | 0 | 0 | — | proxy/floor | 0.50 | 2.00 | 2.00 | +10 | +0 | 2 | 100.00 | 2.00 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "open loop") {
		t.Errorf("report has a section with no data:\n%s", out)
	}

	sb.Reset()
	render(&sb, runInfo{}, map[string][]result{"authz-open/fencegate-redis": {{PerSec: 2000, ServerCPU: us(45), StoreCPU: us(15)}}})
	if want := "| authz-open/fencegate-redis | 2000 | 0 | 0 | 0 | 45 | 15 | 60 | ≤ 60: met | authz-open/noop | — |"; !strings.Contains(sb.String(), want) {
		t.Errorf("open-loop section lacks %q:\n%s", want, sb.String())
	}

	sb.Reset()
	renderMemory(&sb, map[string]memResult{"memory/redis": {Locks: 1000, StoreBytes: 301.4, Elapsed: 1500 * time.Millisecond}})
	if want := "| memory/redis | 1000 | 301 | — | 1.5 s |"; !strings.Contains(sb.String(), want) {
		t.Errorf("memory section lacks %q:\n%s", want, sb.String())
	}
}

// TestMeasureOpen: the open loop starts every scheduled call (rate × d),
// charges each from when it was due, and stops at the first failure.
func TestMeasureOpen(t *testing.T) {
	var calls atomic.Int64
	smp, err := measureOpen(t.Context(), 4, 200, 250*time.Millisecond, func(context.Context, int) error {
		calls.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 50 || smp.n != 50 || len(smp.lat) != 50 {
		t.Errorf("calls %d, n %d, latencies %d; want 50", calls.Load(), smp.n, len(smp.lat))
	}
	if _, err := measureOpen(t.Context(), 4, 200, 250*time.Millisecond, func(context.Context, int) error { return errTest }); !errors.Is(err, errTest) {
		t.Errorf("err %v, want %v", err, errTest)
	}
}

// TestHeldLockMemorySetups runs the memory benchmark's measurements on a
// few locks: the stores open, the locks are taken and held, the sizes read.
func TestHeldLockMemorySetups(t *testing.T) {
	for name, measure := range map[string]func(testing.TB, int) memResult{"bolt": measureBoltMemory, "redis": measureRedisMemory} {
		t.Run(name, func(t *testing.T) {
			if r := measure(t, 40); r.Locks != 40 || r.Elapsed <= 0 {
				t.Errorf("%+v", r)
			}
		})
	}
}

// ratioRecorder records checkRatios' verdicts.
type ratioRecorder struct{ errs, logs []string }

func (r *ratioRecorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *ratioRecorder) Logf(f string, a ...any)   { r.logs = append(r.logs, fmt.Sprintf(f, a...)) }

// TestCheckRatios: BenchmarkExtAuthz's floors hold on the medians of the
// per-round ratios. A subject that misses either floor fails the run, one
// that meets both does not, one whose CPU was not measured fails, and a
// run without the pair checks nothing.
func TestCheckRatios(t *testing.T) {
	us := func(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }
	noop := []result{{PerSec: 10000, ServerCPU: us(30)}, {PerSec: 10000, ServerCPU: us(30)}, {PerSec: 2000, ServerCPU: us(30)}}
	for _, tc := range []struct {
		name     string
		sub      []result
		wantErrs int
	}{
		{"meets both", []result{{PerSec: 8000, ServerCPU: us(45)}, {PerSec: 8000, ServerCPU: us(45)}, {PerSec: 1800, ServerCPU: us(45)}}, 0},
		{"slow", []result{{PerSec: 6000, ServerCPU: us(45)}, {PerSec: 6000, ServerCPU: us(45)}, {PerSec: 1800, ServerCPU: us(45)}}, 1},
		{"costly", []result{{PerSec: 8000, ServerCPU: us(51)}, {PerSec: 8000, ServerCPU: us(51)}, {PerSec: 1800, ServerCPU: us(51)}}, 1},
		{"no CPU measured", []result{{PerSec: 8000}, {PerSec: 8000}, {PerSec: 1800}}, 1},
		{"both", []result{{PerSec: 6000, ServerCPU: us(60)}, {PerSec: 6000, ServerCPU: us(60)}, {PerSec: 1800, ServerCPU: us(60)}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec ratioRecorder
			checkRatios(&rec, map[string][]result{"authz/noop": noop, "authz/fencegate-redis": tc.sub}, "authz/fencegate-redis", "authz/noop", 0.75, 1.6)
			if len(rec.errs) != tc.wantErrs {
				t.Errorf("errors %q, want %d", rec.errs, tc.wantErrs)
			}
		})
	}
	var rec ratioRecorder
	checkRatios(&rec, map[string][]result{"authz/noop": noop}, "authz/fencegate-redis", "authz/noop", 0.75, 1.6)
	if len(rec.errs) != 0 || len(rec.logs) != 1 {
		t.Errorf("without the subject: errors %q, logs %q; want one log line", rec.errs, rec.logs)
	}
}
