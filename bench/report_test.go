package bench

import (
	"flag"
	"fmt"
	"io"
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
	PerSec   float64
	P50, P99 time.Duration
	N        int
}

// scoreboard keeps, per subject id, the final run of each -count round.
type scoreboard struct {
	mu   sync.Mutex
	last map[string]result
	runs map[string][]result
}

var board = &scoreboard{}

// set records a run of id; the framework calls a benchmark several times
// with a growing b.N, and the last call is the one it reports.
func (s *scoreboard) set(id string, r result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]result{}
	}
	s.last[id] = r
}

// commit moves id's last run to its final runs (once its sub-benchmark has
// returned). A sub-benchmark filtered out by -bench leaves nothing to move.
func (s *scoreboard) commit(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
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

// medians returns, per id, the median of each metric over its final runs
// (one per -count round) and how many there were.
func (s *scoreboard) medians() map[string]summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]summary, len(s.runs))
	for id, rs := range s.runs {
		out[id] = summary{
			PerSec: median(rs, func(r result) float64 { return r.PerSec }),
			P50:    median(rs, func(r result) float64 { return float64(r.P50) }),
			P99:    median(rs, func(r result) float64 { return float64(r.P99) }),
			Runs:   len(rs),
		}
	}
	return out
}

// summary is a subject's median over its runs.
type summary struct {
	PerSec, P50, P99 float64 // P50/P99 in nanoseconds
	Runs             int
}

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	} else if n > 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return 0
}

// A section is one comparison of the report: each row is a subject and the
// baseline (floor or peer) it is divided by.
type section struct {
	title, unit, note string
	rows              []row
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
		title: "3. Redis store vs bsm/redislock on the same Redis (peer)",
		unit:  "cycles/s",
		note:  "Acquire+release vs Obtain+Release, same go-redis client and pool. fencegate also issues a fence and writes the lockId index.",
		rows: []row{
			{"peer/redislock", "peer/redislock"},
			{"peer/fencegate-redis", "peer/redislock"},
		},
	},
}

// runInfo is what the report's header says about the run.
type runInfo struct {
	When                time.Time
	Commit              string
	Dirty               bool
	GoVersion, Platform string
	CPUs, Procs         int
	Workers             int
	Command             string
	LoadStart, LoadEnd  string
}

// render writes the report as Markdown: absolute numbers (medians over -count
// rounds) and each subject's ratios to its baseline. Rows with no data (a
// benchmark filtered out or failed) are left out; a missing baseline shows
// as "—".
func render(w io.Writer, info runInfo, m map[string]summary) {
	fmt.Fprintf(w, "# fencegate benchmarks — %s, %s\n\n", info.When.UTC().Format("2006-01-02 15:04 UTC"), info.Commit)
	fmt.Fprintf(w, "- command: `%s`\n", info.Command)
	dirty := ""
	if info.Dirty {
		dirty = " (working tree had uncommitted changes)"
	}
	fmt.Fprintf(w, "- commit: %s%s; %s, %s\n", info.Commit, dirty, info.GoVersion, info.Platform)
	fmt.Fprintf(w, "- %d CPUs, GOMAXPROCS %d; fixed pool of %d concurrent workers per benchmark, each on its own keys\n", info.CPUs, info.Procs, info.Workers)
	fmt.Fprintf(w, "- load average (1/5/15 min) at start: %s; at end: %s\n", info.LoadStart, info.LoadEnd)
	fmt.Fprintf(w, "- numbers are medians over -count rounds; ratios are subject ÷ baseline, both measured back to back in this run\n")
	for _, s := range sections {
		var lines []string
		for _, r := range s.rows {
			sub, ok := m[r.id]
			if !ok {
				continue
			}
			base, hasBase := m[r.baseline]
			ratio := func(a, b float64) string {
				if !hasBase || b == 0 {
					return "—"
				}
				return fmt.Sprintf("%.2f", a/b)
			}
			added := "—"
			if hasBase {
				added = fmt.Sprintf("%+.0f", (sub.P50-base.P50)/1e3)
			}
			lines = append(lines, fmt.Sprintf("| %s | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %d |",
				r.id, sub.PerSec, sub.P50/1e3, sub.P99/1e3, r.baseline,
				ratio(sub.PerSec, base.PerSec), ratio(sub.P50, base.P50), ratio(sub.P99, base.P99), added, sub.Runs))
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n## %s\n\n%s\n\n", s.title, s.note)
		fmt.Fprintf(w, "| benchmark | %s | p50 µs | p99 µs | baseline | %s ratio | p50 ratio | p99 ratio | added p50 µs | runs |\n", s.unit, s.unit)
		fmt.Fprintf(w, "|---|--:|--:|--:|---|--:|--:|--:|--:|--:|\n")
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
}

// TestMain runs the tests and benchmarks, then, if any benchmark produced a
// result, prints the comparison table and writes it to -results.
func TestMain(m *testing.M) {
	flag.Parse()
	start := time.Now()
	loadStart := loadAvg()
	code := m.Run()
	results := board.medians()
	if len(results) == 0 {
		os.Exit(code)
	}
	info := runInfo{
		When: start, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		CPUs: runtime.NumCPU(), Procs: runtime.GOMAXPROCS(0), Workers: *workers,
		Command: command(), LoadStart: loadStart, LoadEnd: loadAvg(),
	}
	info.Commit, info.Dirty = gitCommit()
	var sb strings.Builder
	render(&sb, info, results)
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
	if *workers != 8 {
		parts = append(parts, fmt.Sprintf("-args -workers %d", *workers))
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
