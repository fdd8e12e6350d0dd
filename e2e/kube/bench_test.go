package kube_test

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// Flags of BenchmarkAdmission (pass after -args).
var (
	admissionWrites  = flag.Int("admission-writes", 2000, "BenchmarkAdmission: writes per subject (at least; b.N if larger)")
	admissionRounds  = flag.Int("admission-rounds", 3, "BenchmarkAdmission: rounds of -admission-writes pairs; percentiles pool all rounds")
	admissionWorkers = flag.Int("admission-workers", 4, "BenchmarkAdmission: clients of the concurrent run, each on its own two objects (0: no concurrent run)")
	admissionOut     = flag.String("admission-out", "", "BenchmarkAdmission: also write the markdown report to this file")
)

// admissionSample is the latency of every write of one subject, in order.
type admissionSample struct {
	writes  []time.Duration
	handler []time.Duration // time inside fencegate's handler, governed only
}

// quantile is the nearest-rank quantile q (0 < q ≤ 1) of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q + 0.999999)
	i = max(1, min(i, len(s)))
	return s[i-1]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// measureAdmission creates two ConfigMaps and updates each n times,
// alternating one write of each so both see the same moment of a noisy
// machine: prefix+"floor" carries
// no fencegate annotations (the webhook's matchConditions keep the API server
// from calling it: the floor), "adm-governed" carries the current fence of
// the held lock on orderKey (the webhook is called and allows). Both are
// plain PUTs by writerUser through the real kube-apiserver and etcd. It
// checks that the floor never reached the webhook and every governed write
// did, so the two figures measure what their names say.
//
// With shared set, other clients write at the same time: the per-write
// check that the floor stayed off the webhook and the handler times are
// skipped (the review counter is shared); the caller checks the total.
func measureAdmission(t testing.TB, c *cluster, g *gate, fence string, n int, prefix string, shared bool) (floor, governed admissionSample) {
	floorName, governedName := prefix+"floor", prefix+"governed"
	t.Helper()
	for _, o := range []struct {
		name string
		ann  map[string]string
	}{{floorName, nil}, {governedName, stamped(fence)}} {
		if code, s := c.write(t, writerUser, http.MethodPost, "", configMap(o.name, o.ann, "0"), false); code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", o.name, code, s.raw)
		}
	}
	floor.writes = make([]time.Duration, 0, n)
	governed.writes = make([]time.Duration, 0, n)
	handledBefore := len(g.handlerTimes())
	var floorReviews float64
	for i := range n {
		state := strconv.Itoa(i + 1)
		// Alternate which goes first, so neither always follows the other.
		order := []string{floorName, governedName}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, name := range order {
			var ann map[string]string
			if name == governedName {
				ann = stamped(fence)
			}
			var before float64
			if !shared {
				before = g.reviews(t)
			}
			start := time.Now()
			code, s := c.write(t, writerUser, http.MethodPut, name, configMap(name, ann, state), false)
			took := time.Since(start)
			if code != http.StatusOK {
				t.Fatalf("update %s #%d: %d %s", name, i+1, code, s.raw)
			}
			if name == floorName {
				floor.writes = append(floor.writes, took)
				if !shared {
					floorReviews += g.reviews(t) - before
				}
			} else {
				governed.writes = append(governed.writes, took)
			}
		}
	}
	if floorReviews != 0 {
		t.Fatalf("the ungoverned object reached the webhook %v times: the floor is not a floor", floorReviews)
	}
	if shared {
		return floor, governed
	}
	governed.handler = g.handlerTimes()[handledBefore:]
	if len(governed.handler) < n {
		t.Fatalf("the webhook handled %d of %d governed writes", len(governed.handler), n)
	}
	return floor, governed
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return f[0] + " / " + f[1] + " / " + f[2]
}

// BenchmarkAdmission measures the latency fencegate's admission webhook adds
// to a write through a real kube-apiserver: ConfigMap updates of an object
// the webhook never sees (floor) and of one carrying the current fence of a
// held lock (the API server calls the webhook, which allows), alternated,
// sequential, -admission-rounds rounds of at least -admission-writes of each
// (percentiles over all of them). Reported: p50/p99/p999 of
// each, the added p99 (governed − floor), and the handler's own p99.
//
//	scripts/testenv go test -run '^$' -bench Admission -benchtime 1x ./e2e/kube/ \
//	    -args -admission-out=$PWD/bench/results/DATE-admission.md
func BenchmarkAdmission(b *testing.B) {
	c := startCluster(b)
	g := startGate(b, fencecheck.ModeEnforce)
	setUp(b, c, g)
	held := locktest.Acquire(b, g.store, orderKey, 10*time.Minute)
	loadStart := loadAvg()

	// Warm-up: connections, the API server's webhook client, etcd's pages.
	measureAdmission(b, c, g, held.Fence, 20, "adm-warm-", false)

	n := max(b.N, *admissionWrites)
	rounds := max(1, *admissionRounds)
	var floor, governed admissionSample
	var addedP99 []float64 // per round, governed − floor
	b.ResetTimer()
	began := time.Now()
	for r := range rounds {
		f, gv := measureAdmission(b, c, g, held.Fence, n, fmt.Sprintf("adm-r%d-", r), false)
		floor.writes = append(floor.writes, f.writes...)
		governed.writes = append(governed.writes, gv.writes...)
		governed.handler = append(governed.handler, gv.handler...)
		addedP99 = append(addedP99, us(quantile(gv.writes, 0.99)-quantile(f.writes, 0.99)))
	}
	elapsed := time.Since(began)
	workers := max(0, *admissionWorkers)
	var cFloor, cGoverned admissionSample
	var cElapsed time.Duration
	if workers > 0 {
		cFloor, cGoverned, cElapsed = concurrentAdmission(b, c, g, held.Fence, n, workers)
	}
	b.StopTimer()
	loadEnd := loadAvg()
	slices.Sort(addedP99)

	fp50, fp99, fp999 := quantile(floor.writes, 0.50), quantile(floor.writes, 0.99), quantile(floor.writes, 0.999)
	gp50, gp99, gp999 := quantile(governed.writes, 0.50), quantile(governed.writes, 0.99), quantile(governed.writes, 0.999)
	hp50, hp99 := quantile(governed.handler, 0.50), quantile(governed.handler, 0.99)
	b.ReportMetric(float64(n), "writes/subject")
	b.ReportMetric(us(fp50), "floor-p50-µs")
	b.ReportMetric(us(fp99), "floor-p99-µs")
	b.ReportMetric(us(fp999), "floor-p999-µs")
	b.ReportMetric(us(gp50), "governed-p50-µs")
	b.ReportMetric(us(gp99), "governed-p99-µs")
	b.ReportMetric(us(gp999), "governed-p999-µs")
	b.ReportMetric(us(gp50-fp50), "added-p50-µs")
	b.ReportMetric(us(gp99-fp99), "added-p99-µs")
	b.ReportMetric(addedP99[len(addedP99)/2], "added-p99-median-round-µs")
	b.ReportMetric(us(hp99), "handler-p99-µs")

	var md strings.Builder
	fmt.Fprintf(&md, "# fencegate admission webhook through kube-apiserver — %s\n\n", began.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&md, "- command: `scripts/testenv go test -run '^$' -bench Admission -benchtime 1x ./e2e/kube/ -args -admission-writes=%d -admission-rounds=%d -admission-workers=%d -admission-out=...`\n", *admissionWrites, rounds, *admissionWorkers)
	fmt.Fprintf(&md, "- %s, %s/%s, %d CPUs, GOMAXPROCS %d; etcd (`--unsafe-no-fsync`) + kube-apiserver from e2e/kube/build.sh, fencegate's handler in the bench process on the bolt store\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(&md, "- N = %d sequential ConfigMap updates per subject (%d rounds of %d, each on two fresh objects, after 20 warm-up pairs), one write of each subject in turn by one client; %v in all; percentiles nearest-rank over all N\n",
		n*rounds, rounds, n, elapsed.Round(time.Millisecond))
	fmt.Fprintf(&md, "- load average (1/5/15 min) at start: %s; at end: %s\n\n", loadStart, loadEnd)
	md.WriteString("| subject | what the API server does | p50 µs | p99 µs | p999 µs |\n|---|---|--:|--:|--:|\n")
	fmt.Fprintf(&md, "| floor (ungoverned) | no fencegate annotations: matchConditions skip the webhook | %.0f | %.0f | %.0f |\n", us(fp50), us(fp99), us(fp999))
	fmt.Fprintf(&md, "| governed | current fence of a held lock: calls the webhook (TLS, loopback), which allows | %.0f | %.0f | %.0f |\n", us(gp50), us(gp99), us(gp999))
	fmt.Fprintf(&md, "| **added** (governed − floor) | | %+.0f | **%+.0f** | %+.0f |\n", us(gp50-fp50), us(gp99-fp99), us(gp999-fp999))
	fmt.Fprintf(&md, "| fencegate handler alone | time inside the handler per review | %.0f | %.0f | — |\n", us(hp50), us(hp99))
	fmt.Fprintf(&md, "\nAdded p99 per round (governed − floor, µs, sorted): %s. ns/op in the raw output is the whole measurement (b.N = 1): ignore it.\n", fmtList(addedP99))
	if workers > 0 {
		cf50, cf99, cf999 := quantile(cFloor.writes, 0.50), quantile(cFloor.writes, 0.99), quantile(cFloor.writes, 0.999)
		cg50, cg99, cg999 := quantile(cGoverned.writes, 0.50), quantile(cGoverned.writes, 0.99), quantile(cGoverned.writes, 0.999)
		b.ReportMetric(us(cg99-cf99), "concurrent-added-p99-µs")
		fmt.Fprintf(&md, "\n## %d concurrent clients\n\nThe same pairs, %d clients at once, each on its own two objects; %d writes per subject in all (%d per client), %v; handler times not separated.\n\n",
			workers, workers, len(cFloor.writes), len(cFloor.writes)/workers, cElapsed.Round(time.Millisecond))
		md.WriteString("| subject | p50 µs | p99 µs | p999 µs |\n|---|--:|--:|--:|\n")
		fmt.Fprintf(&md, "| floor (ungoverned) | %.0f | %.0f | %.0f |\n", us(cf50), us(cf99), us(cf999))
		fmt.Fprintf(&md, "| governed | %.0f | %.0f | %.0f |\n", us(cg50), us(cg99), us(cg999))
		fmt.Fprintf(&md, "| **added** (governed − floor) | %+.0f | **%+.0f** | %+.0f |\n", us(cg50-cf50), us(cg99-cf99), us(cg999-cf999))
	}
	b.Logf("\n%s", md.String())
	if *admissionOut != "" {
		if err := os.WriteFile(*admissionOut, []byte(md.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func fmtList(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%+.0f", x)
	}
	return strings.Join(s, ", ")
}

// clientTB lets a client goroutine use the harness's helpers: their Fatal
// records the failure and ends that goroutine only (testing forbids FailNow
// off the benchmark's goroutine); the caller reports it.
type clientTB struct {
	testing.TB
	err error
}

func (c *clientTB) Fatalf(format string, args ...any) {
	c.err = fmt.Errorf(format, args...)
	runtime.Goexit()
}

func (c *clientTB) Fatal(args ...any) {
	c.err = errors.New(fmt.Sprint(args...))
	runtime.Goexit()
}

// concurrentAdmission runs measureAdmission on workers clients at once, n
// pairs in all, and checks that every governed write was reviewed.
func concurrentAdmission(b *testing.B, c *cluster, g *gate, fence string, n, workers int) (floor, governed admissionSample, elapsed time.Duration) {
	b.Helper()
	per := max(1, n/workers)
	tbs := make([]*clientTB, workers)
	out := make([][2]admissionSample, workers)
	before := g.reviews(b)
	var wg sync.WaitGroup
	began := time.Now()
	for w := range workers {
		tbs[w] = &clientTB{TB: b}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, gv := measureAdmission(tbs[w], c, g, fence, per, fmt.Sprintf("adm-c%d-", w), true)
			out[w] = [2]admissionSample{f, gv}
		}()
	}
	wg.Wait()
	elapsed = time.Since(began)
	for w, tb := range tbs {
		if tb.err != nil {
			b.Fatalf("client %d: %v", w, tb.err)
		}
		floor.writes = append(floor.writes, out[w][0].writes...)
		governed.writes = append(governed.writes, out[w][1].writes...)
	}
	// At least one review per governed write (each client's create and
	// updates). Not exactly one: an unconditional update the API server first
	// tries against its watch cache can hit a conflict and run admission
	// again, so the totals cannot tell an ungoverned write apart; the
	// sequential rounds check that per write, on the same objects' shape.
	if got, want := g.reviews(b)-before, float64(workers*(per+1)); got < want {
		b.Fatalf("the webhook reviewed %v writes during the concurrent run; want at least %v (one per governed write)", got, want)
	}
	return floor, governed, elapsed
}
