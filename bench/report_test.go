package bench

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// resultsDir is where a benchmark run writes its report; empty disables it.
var resultsDir = flag.String("results", "results", "directory the benchmark report is written to (empty: print only)")

// result is a benchmark's final run: throughput and latency percentiles.
type result struct {
	PerSec         float64
	P50, P99, P999 time.Duration
	N              int
	// CPU is this process's CPU time per call (clients and servers under
	// test together); StoreCPU the Redis server's, when the subject uses
	// Redis.
	CPU, StoreCPU time.Duration
	// Extra holds a run's extra metrics by name (subject.meter).
	Extra map[string]float64
}

// scoreboard keeps, per subject id, the final run of each -count round.
type scoreboard struct {
	mu   sync.Mutex
	last map[string]result
	runs map[string][]result
}

var board = &scoreboard{}

// set records a run of id. The framework calls a benchmark several times
// with a strictly growing b.N and reports the last call; a call whose b.N is
// not larger than the previous one's starts a new -count round, so the
// previous call was that round's final run.
func (s *scoreboard) set(id string, r result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]result{}
	}
	if prev, ok := s.last[id]; ok && r.N <= prev.N {
		s.commitLocked(id)
	}
	s.last[id] = r
}

// commit moves id's pending run to its final runs (once its sub-benchmark has
// returned). A sub-benchmark filtered out by -bench leaves nothing to move.
func (s *scoreboard) commit(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commitLocked(id)
}

func (s *scoreboard) commitLocked(id string) {
	r, ok := s.last[id]
	if !ok {
		return
	}
	delete(s.last, id)
	if s.runs == nil {
		s.runs = map[string][]result{}
	}
	s.runs[id] = append(s.runs[id], r)
}

// snapshot returns a copy of every id's final runs, in round order.
func (s *scoreboard) snapshot() map[string][]result {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]result, len(s.runs))
	for id, rs := range s.runs {
		out[id] = slices.Clone(rs)
	}
	return out
}

// median of v (which it sorts); 0 for none.
func median(v []float64) float64 {
	slices.Sort(v)
	switch n := len(v); {
	case n == 0:
		return 0
	case n%2 == 1:
		return v[n/2]
	default:
		return (v[n/2-1] + v[n/2]) / 2
	}
}

// each applies f to every run.
func each(rs []result, f func(result) float64) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return v
}

// paired applies f to the i-th runs of sub and base. With -rounds, run i of
// a subject and run i of its baseline ran back to back in the same round, so
// their ratio is the least disturbed by the machine's load changing between
// rounds. (-count repeats one sub-benchmark back to back instead; its runs
// pair up too, just less tightly in time.)
func paired(sub, base []result, f func(s, b result) float64) []float64 {
	n := min(len(sub), len(base))
	v := make([]float64, n)
	for i := range n {
		v[i] = f(sub[i], base[i])
	}
	return v
}

func perSec(r result) float64 { return r.PerSec }
func p50(r result) float64    { return float64(r.P50) }
func p99(r result) float64    { return float64(r.P99) }
func p999(r result) float64   { return float64(r.P999) }
func cpu(r result) float64    { return float64(r.CPU) }
func storeCPU(r result) float64 {
	return float64(r.StoreCPU)
}

// totalCPU is the CPU per call of the process and its Redis together.
func totalCPU(r result) float64 { return float64(r.CPU + r.StoreCPU) }

// ratioOf returns f(sub)/f(base) per round (0 when the base is 0).
func ratioOf(f func(result) float64) func(s, b result) float64 {
	return func(s, b result) float64 {
		if f(b) == 0 {
			return 0
		}
		return f(s) / f(b)
	}
}

// A section is one comparison of the report: each row is a subject and the
// baseline (floor or peer) it is divided by.
type section struct {
	title, unit, note string
	rows              []row
	// extras are extra metrics (result.Extra) shown as more columns:
	// the median over the runs, absolute (not a ratio).
	extras []string
}

type row struct{ id, baseline string }

// sections is the report's layout, in the order the benchmarks run.
var sections = []section{
	{
		title: "1. Gateway lock API vs the store in-process (floor)",
		unit:  "cycles/s",
		note:  "One cycle = acquire + release (two requests over the gateway) of a key only that worker uses. Ratio < 1: the gateway path is slower than calling the store directly.",
		rows: []row{
			{"gateway/bolt/in-process", "gateway/bolt/in-process"},
			{"gateway/bolt/http", "gateway/bolt/in-process"},
			{"gateway/bolt/grpc", "gateway/bolt/in-process"},
			{"gateway/redis/in-process", "gateway/redis/in-process"},
			{"gateway/redis/http", "gateway/redis/in-process"},
			{"gateway/redis/grpc", "gateway/redis/in-process"},
			{"gateway/postgres/in-process", "gateway/postgres/in-process"},
			{"gateway/postgres/http", "gateway/postgres/in-process"},
			{"gateway/postgres/grpc", "gateway/postgres/in-process"},
		},
	},
	{
		title: "2. ext_authz Check vs a no-op ext_authz server (floor)",
		unit:  "checks/s",
		note:  "A POST carrying the current fence of a held lock (allowed after one Redis read) vs a server that answers OK at once; same grpc.Server, listener, connection and request.",
		rows: []row{
			{"authz/noop", "authz/noop"},
			{"authz/fencegate-redis", "authz/noop"},
		},
	},
	{
		title: "2b. ext_authz Check at a fixed rate (open loop) vs the no-op server (floor)",
		unit:  "checks/s",
		note:  "The same servers and requests, calls started on schedule (-open-rate, default 2,000/s) whatever the answers' latency; latency is counted from when a call was due. checks/s is the offered rate actually sustained.",
		rows: []row{
			{"authz-open/noop", "authz-open/noop"},
			{"authz-open/fencegate-redis", "authz-open/noop"},
		},
	},
	{
		title: "3. Redis store vs bsm/redislock on the same Redis (peer)",
		unit:  "cycles/s",
		note:  "Acquire+release vs Obtain+Release, same go-redis client and pool. fencegate also issues a fence and writes the lockId index.",
		rows: []row{
			{"peer/redislock", "peer/redislock"},
			{"peer/fencegate-redis", "peer/redislock"},
		},
	},
	{
		title: "4. fencegate proxy (barrier off, on) and nginx + forward-auth vs a plain httputil.ReverseProxy (floor)",
		unit:  "writes/s",
		note: "A PUT carrying the current fence of a lock its worker holds, to an upstream that answers at once. floor: httputil.ReverseProxy in its own process; fencegate: the `fencegate proxy` binary on Redis, route without and with the barrier; nginx-forward-auth: the shipped nginx.conf in front of `fencegate serve` on Redis (peer). " +
			"cpu-µs/req: user+system CPU of the edge's processes (/proc/<pid>/stat: the floor; fencegate proxy; nginx master and worker + fencegate serve) plus Redis's own (INFO cpu), per request. " +
			"redis-trips/req: EVALSHA+EVAL+HDEL calls (INFO commandstats) per request: the check (or the barrier's admit) and the barrier's completion (one HDEL); allowed writes are not audited.",
		rows: []row{
			{"proxy/floor", "proxy/floor"},
			{"proxy/fencegate", "proxy/floor"},
			{"proxy/fencegate-barrier", "proxy/floor"},
			{"proxy/nginx-forward-auth", "proxy/floor"},
		},
		extras: []string{"cpu-µs/req", "redis-trips/req"},
	},
}

// extraHeads is the header cells of a section's extra columns.
func extraHeads(extras []string) string {
	var b strings.Builder
	for _, k := range extras {
		b.WriteString(" " + k + " |")
	}
	return b.String()
}

// runInfo is what the report's header says about the run.
type runInfo struct {
	When                time.Time
	Commit              string
	Dirty               bool
	GoVersion, Platform string
	CPUs, Procs         int
	Workers, Rounds     int
	Command             string
	LoadStart, LoadEnd  string
}

// render writes the report as Markdown: absolute numbers (medians over the
// runs) and each subject's ratios to its baseline (medians of the
// per-round ratios, with their range when there are several rounds). Rows
// with no data (a benchmark filtered out) are left out; a missing baseline
// shows as "—".
func render(w io.Writer, info runInfo, runs map[string][]result) {
	fmt.Fprintf(w, "# fencegate benchmarks — %s, %s\n\n", info.When.UTC().Format("2006-01-02 15:04 UTC"), info.Commit)
	fmt.Fprintf(w, "- command: `%s`\n", info.Command)
	dirty := ""
	if info.Dirty {
		dirty = " (working tree had uncommitted changes)"
	}
	fmt.Fprintf(w, "- commit: %s%s; %s, %s\n", info.Commit, dirty, info.GoVersion, info.Platform)
	fmt.Fprintf(w, "- %d CPUs, GOMAXPROCS %d; fixed pool of %d concurrent workers per benchmark, each on its own keys\n", info.CPUs, info.Procs, info.Workers)
	fmt.Fprintf(w, "- load average (1/5/15 min) at start: %s; at end: %s\n", info.LoadStart, info.LoadEnd)
	fmt.Fprintf(w, "- %d rounds per suite, each subject run right after its baseline; absolute numbers: medians over the runs; ratios: subject ÷ baseline within each round, median over rounds (range in brackets)\n", info.Rounds)
	for _, s := range sections {
		var lines []string
		for _, r := range s.rows {
			sub := runs[r.id]
			if len(sub) == 0 {
				continue
			}
			base := runs[r.baseline]
			ratio := func(f func(result) float64, withRange bool) string {
				v := paired(sub, base, ratioOf(f))
				if len(v) == 0 {
					return "—"
				}
				m := median(v) // sorts v
				if !withRange || len(v) == 1 {
					return fmt.Sprintf("%.2f", m)
				}
				return fmt.Sprintf("%.2f (%.2f–%.2f)", m, v[0], v[len(v)-1])
			}
			added := func(f func(result) float64) string {
				d := paired(sub, base, func(s, b result) float64 { return f(s) - f(b) })
				if len(d) == 0 {
					return "—"
				}
				return fmt.Sprintf("%+.0f", median(d)/1e3)
			}
			extra := ""
			for _, k := range s.extras {
				extra += fmt.Sprintf(" %.2f |", median(each(sub, func(r result) float64 { return r.Extra[k] })))
			}
			redis := "—"
			if median(each(sub, storeCPU)) > 0 {
				redis = fmt.Sprintf("%.0f", median(each(sub, storeCPU))/1e3)
			}
			lines = append(lines, fmt.Sprintf("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s | %d |%s",
				r.id, median(each(sub, perSec)), median(each(sub, p50))/1e3, median(each(sub, p99))/1e3, median(each(sub, p999))/1e3,
				median(each(sub, cpu))/1e3, redis, r.baseline,
				ratio(perSec, true), ratio(p50, true), ratio(p99, false), added(p50), added(totalCPU), len(sub), extra))
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n## %s\n\n%s\n\n", s.title, s.note)
		fmt.Fprintf(w, "| benchmark | %s | p50 µs | p99 µs | p999 µs | CPU µs/op | Redis CPU µs/op | baseline | %s ratio | p50 ratio | p99 ratio | added p50 µs | added CPU µs/op | runs |%s\n", s.unit, s.unit, extraHeads(s.extras))
		fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|%s\n", strings.Repeat("--:|", len(s.extras)))
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
}

// renderMemory writes the memory-per-held-lock section: the totals, then
// per store where the bytes go.
func renderMemory(w io.Writer, mem map[string]memResult) {
	if len(mem) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## 4. Memory per held lock\n\nLocks acquired and left held (TTL 10 min), size before vs after, divided by the locks. bolt: the file's growth and this process's RSS growth (the embedded store is the gateway); Redis: `used_memory` growth (lock value, lockId index, fence counter, their expiries), with the default key prefix on a database of its own where the server has one free (bench/README.md). Budget: the spec's 1 KB; target < 512 B.\n\n")
	fmt.Fprintf(w, "| store | locks held | store bytes/lock | gateway RSS bytes/lock | acquire time |\n|---|--:|--:|--:|--:|\n")
	ids := []string{"memory/bolt", "memory/redis"}
	for _, id := range ids {
		r, ok := mem[id]
		if !ok {
			continue
		}
		rssCol := "—"
		if r.RSSBytes != 0 {
			rssCol = fmt.Sprintf("%.0f", r.RSSBytes)
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %.1f s |\n", id, r.Locks, r.StoreBytes, rssCol, r.Elapsed.Seconds())
	}
	for _, id := range ids {
		r, ok := mem[id]
		if !ok || len(r.Parts) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s, where the %.0f bytes per lock go (%s):\n\n| part | bytes/lock | |\n|---|--:|---|\n", id, r.StoreBytes, r.Setup)
		for _, p := range r.Parts {
			fmt.Fprintf(w, "| %s | %.0f | %s |\n", p.Name, p.Bytes, p.Note)
		}
	}
}

// TestMain runs the tests and benchmarks, then, if any benchmark produced a
// result, prints the comparison table and writes it to -results.
func TestMain(m *testing.M) {
	if u := os.Getenv(floorEnv); u != "" {
		runFloorProxy(u) // the floor of BenchmarkProxy, in its own process
	}
	flag.Parse()
	start := time.Now()
	loadStart := loadAvg()
	code := m.Run()
	results := board.snapshot()
	memBoard.Lock()
	mem := maps.Clone(memBoard.m)
	memBoard.Unlock()
	if len(results) == 0 && len(mem) == 0 {
		os.Exit(code)
	}
	info := runInfo{
		When: start, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		CPUs: runtime.NumCPU(), Procs: runtime.GOMAXPROCS(0), Workers: *workers, Rounds: *rounds,
		Command: command(), LoadStart: loadStart, LoadEnd: loadAvg(),
	}
	info.Commit, info.Dirty = gitCommit()
	var sb strings.Builder
	render(&sb, info, results)
	renderMemory(&sb, mem)
	fmt.Print("\n" + sb.String())
	if code == 0 && *resultsDir != "" {
		name := filepath.Join(*resultsDir, start.UTC().Format("2006-01-02")+"-"+info.Commit+".md")
		if err := os.MkdirAll(*resultsDir, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			code = 1
		} else if err := os.WriteFile(name, []byte(sb.String()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "bench: write report: %v\n", err)
			code = 1
		} else {
			fmt.Printf("\nreport written to bench/%s\n", filepath.ToSlash(name))
		}
	}
	os.Exit(code)
}

// command reconstructs the go test command line of this run from the flags
// the test binary received.
func command() string {
	val := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	parts := []string{"go test -run '^$'", "-bench '" + val("test.bench") + "'", "-benchtime " + val("test.benchtime")}
	if c := val("test.count"); c != "" && c != "1" {
		parts = append(parts, "-count "+c)
	}
	if c := val("test.cpu"); c != "" {
		parts = append(parts, "-cpu "+c)
	}
	parts = append(parts, "./bench/...")
	var args []string
	if *workers != 16 {
		args = append(args, fmt.Sprintf("-workers %d", *workers))
	}
	if *rounds != 3 {
		args = append(args, fmt.Sprintf("-rounds %d", *rounds))
	}
	if *openRate != 2000 {
		args = append(args, fmt.Sprintf("-open-rate %d", *openRate))
	}
	if *openFor != 5*time.Second {
		args = append(args, fmt.Sprintf("-open-for %v", *openFor))
	}
	if *heldLocks != 100_000 {
		args = append(args, fmt.Sprintf("-held-locks %d", *heldLocks))
	}
	if len(args) > 0 {
		parts = append(parts, "-args "+strings.Join(args, " "))
	}
	return strings.Join(parts, " ")
}

// gitCommit returns the short HEAD commit ("unknown" outside git) and
// whether tracked files had uncommitted changes.
func gitCommit() (string, bool) {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown", false
	}
	st, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	return strings.TrimSpace(string(out)), len(strings.TrimSpace(string(st))) > 0
}

// loadAvg is the system load average, to show how busy the machine was.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " / ")
}
