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
	// CPU is this process's CPU time per call: the clients, and the
	// servers under test when they run in process. ServerCPU is the
	// subject's server processes' (subject.server; 0 when the servers run
	// in process), StoreCPU the Redis server's, when the subject uses
	// Redis.
	CPU, ServerCPU, StoreCPU time.Duration
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
func serverCPU(r result) float64 { return float64(r.ServerCPU) }

// totalCPU is the CPU per call of the process and its Redis together.
func totalCPU(r result) float64 { return float64(r.CPU + r.StoreCPU) }

// serverStoreCPU is the CPU per call of the server processes and their
// Redis together: what a deployment pays per call, clients aside.
func serverStoreCPU(r result) float64 { return float64(r.ServerCPU + r.StoreCPU) }

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
	// servers: the subjects' servers run in their own processes
	// (subject.server), so the CPU columns are the server's own, Redis's,
	// their sum and the sum against the row's cpuTarget — instead of this
	// process's, where clients and servers share it.
	servers bool
	// floorHead, when set, heads a column of each row's throughput ratio
	// to its row.floor (a second baseline: the bare transport).
	floorHead string
	// luaHead, when set, heads a column of each row's throughput ratio to
	// its row.lua (the hand-written Lua floor, luafloor_test.go).
	luaHead string
}

type row struct {
	id, baseline string
	// floor is a second baseline (section.floorHead); empty: none.
	floor string
	// lua is a third baseline (section.luaHead); empty: none.
	lua string
	// cpuTarget is issue #12's bound on server + Redis CPU per call
	// (section.servers); zero: none.
	cpuTarget time.Duration
}

// sections is the report's layout, in the order the benchmarks run.
var sections = []section{
	{
		title: "1. Gateway lock API vs the store in-process (floor) and the bare transport",
		unit:  "cycles/s",
		note: "One cycle = acquire + release (two requests over the gateway) of a key only that worker uses. Ratio < 1: the path is slower than calling the store directly (target: HTTP ≥ 0.5×, gRPC ≥ 0.6×; every store ≥ 2,000 cycles/s). " +
			"gateway/transport/{http,grpc}: the same client against a server answering canned replies (no store, no fencegate logic) on the same listener settings — what the transport alone reaches; run once per round, in the Redis block, each right before fencegate over it, and divided by the Redis store in-process. " +
			"÷ bare transport (Redis rows, measured next to the floors): fencegate's cycles/s over that round's transport floor, how much of what the transport allows fencegate keeps. " +
			"gateway/redis/lua-floor: a hand-written Lua acquire and release with SyncGuard's key layout, one EVALSHA per call through go-redis from this process, run right before gateway/redis/http; ÷ Lua floor: the HTTP lock API's cycles/s over it (issue #21 target: ≥ 0.45×). CPU µs/op: this process (clients and servers together).",
		floorHead: "cycles/s ÷ bare transport",
		luaHead:   "cycles/s ÷ Lua floor",
		rows: []row{
			{id: "gateway/bolt/in-process", baseline: "gateway/bolt/in-process"},
			{id: "gateway/bolt/http", baseline: "gateway/bolt/in-process"},
			{id: "gateway/bolt/grpc", baseline: "gateway/bolt/in-process"},
			{id: "gateway/redis/in-process", baseline: "gateway/redis/in-process"},
			{id: "gateway/transport/http", baseline: "gateway/redis/in-process"},
			{id: "gateway/redis/lua-floor", baseline: "gateway/redis/in-process"},
			{id: "gateway/redis/http", baseline: "gateway/redis/in-process", floor: "gateway/transport/http", lua: "gateway/redis/lua-floor"},
			{id: "gateway/transport/grpc", baseline: "gateway/redis/in-process"},
			{id: "gateway/redis/grpc", baseline: "gateway/redis/in-process", floor: "gateway/transport/grpc"},
			{id: "gateway/postgres/in-process", baseline: "gateway/postgres/in-process"},
			{id: "gateway/postgres/http", baseline: "gateway/postgres/in-process"},
			{id: "gateway/postgres/grpc", baseline: "gateway/postgres/in-process"},
		},
	},
	{
		title:   "2. ext_authz Check vs a no-op ext_authz server (floor)",
		unit:    "checks/s",
		servers: true,
		note: "A POST carrying the current fence of a held lock (allowed after one Redis read), answered by the `fencegate serve` binary on Redis, vs a server that answers OK at once on the same grpc.Server options; each server in its own process, the 16 clients in the bench process on one shared connection. Target: ≥ 0.65× the no-op's checks/s. " +
			"server CPU: the server process's user+system time (/proc/<pid>/stat); Redis CPU: INFO cpu; both per check over the run. Target for their sum: ≤ 60 µs (the issue's no-op: 35 µs). " +
			"server CPU ratio: the server's CPU per check ÷ the no-op server's, per round (issue #27 item 2's targets, not met: ≤ 1.6×, and checks/s ratio ≥ 0.75×); BenchmarkExtAuthz fails when the medians miss -authz-max-cpu-ratio (default 2.2) or -authz-min-ratio (default 0.5), a guard against regressions.",
		rows: []row{
			{id: "authz/noop", baseline: "authz/noop"},
			{id: "authz/fencegate-redis", baseline: "authz/noop", cpuTarget: 60 * time.Microsecond},
		},
	},
	{
		title:   "2b. ext_authz Check at a fixed rate (open loop) vs the no-op server (floor)",
		unit:    "checks/s",
		servers: true,
		note: "The same servers and requests, calls started on schedule (-open-rate, default 2,000/s) whatever the answers' latency; latency is counted from when a call was due. checks/s is the offered rate actually sustained. Target: p99 ≤ 1.0 ms. " +
			"CPU per check below saturation is higher than in the closed loop (fewer calls share each wake-up and syscall); the 60 µs target is shown here too.",
		rows: []row{
			{id: "authz-open/noop", baseline: "authz-open/noop"},
			{id: "authz-open/fencegate-redis", baseline: "authz-open/noop", cpuTarget: 60 * time.Microsecond},
		},
	},
	{
		title: "3. Redis store vs bsm/redislock on the same Redis (peer)",
		unit:  "cycles/s",
		note:  "Acquire+release vs Obtain+Release, same go-redis client and pool. fencegate also issues a fence and writes the lockId index. Target: ≥ 0.75×.",
		rows: []row{
			{id: "peer/redislock", baseline: "peer/redislock"},
			{id: "peer/fencegate-redis", baseline: "peer/redislock"},
		},
	},
	{
		title: "3b. The clock floor's cost: acquire+release, fenceFloor=clock (the default) vs off, each store in-process (floor: off)",
		unit:  "cycles/s",
		note:  "The same store opened twice, fenceFloor=off (counter+1) and clock (max(counter+1, floor(store now)), docs/fences.md), 16 workers on keys of their own. Both are one store round trip. Target (issue #18): no measurable change, i.e. the ratio's range across rounds includes 1.",
		rows: []row{
			{id: "floor/bolt/off", baseline: "floor/bolt/off"},
			{id: "floor/bolt/clock", baseline: "floor/bolt/off"},
			{id: "floor/redis/off", baseline: "floor/redis/off"},
			{id: "floor/redis/clock", baseline: "floor/redis/off"},
			{id: "floor/postgres/off", baseline: "floor/postgres/off"},
			{id: "floor/postgres/clock", baseline: "floor/postgres/off"},
		},
	},
	{
		title: "4. fencegate proxy (barrier off, on) and nginx + forward-auth vs a plain httputil.ReverseProxy (floor)",
		unit:  "writes/s",
		note: "A PUT carrying the current fence of a lock its worker holds, to an upstream that answers at once. floor: httputil.ReverseProxy in its own process; fencegate: the `fencegate proxy` binary on Redis, route without and with the barrier; nginx-forward-auth: the shipped nginx.conf in front of `fencegate serve` on Redis (peer). " +
			"cpu-µs/req: user+system CPU of the edge's processes (/proc/<pid>/stat: the floor; fencegate proxy; nginx master and worker + fencegate serve) plus Redis's own (INFO cpu), per request. " +
			"redis-calls/req: EVALSHA+EVAL calls (INFO commandstats) per request: the check (or the barrier's admit) and the barrier's completion (one script); allowed writes are not audited.",
		rows: []row{
			{id: "proxy/floor", baseline: "proxy/floor"},
			{id: "proxy/fencegate", baseline: "proxy/floor"},
			{id: "proxy/fencegate-barrier", baseline: "proxy/floor"},
			{id: "proxy/nginx-forward-auth", baseline: "proxy/floor"},
		},
		extras: []string{"cpu-µs/req", "redis-calls/req"},
	},
	{
		title: "5. Redis Cluster (issue #30): lock cycles and ext_authz checks on a cluster vs one server (floor), one master vs three",
		unit:  "cycles/s",
		note: "cluster/one-node: the store on REDIS_URL (one redis-server, SyncGuard's layout), in-process, 16 workers on keys of their own (floor). cluster/one-master and cluster/three-masters: the store on a cluster of one and of three masters started by the benchmark (no replicas, cluster layout: hash-tagged keys, one dispatcher per master). ÷ one master: the three-master cluster's cycles/s over the one-master cluster's in the same round: how throughput grows with shards. " +
			"On this 2-core machine the three masters, the bench process (clients and store) and the kernel share the same two cores, so three shards cannot give three times the throughput: the ratio measures what sharding costs or gains when CPU, not Redis's single thread, is the limit; growth with shards needs a core per master beyond the clients'. " +
			"CPU µs/op is this process's (clients and store); Redis CPU is measured for the one server only, not for the cluster nodes, so the added-CPU column understates the cluster rows by their Redis share (about the one server's). " +
			"cluster/authz-*: ext_authz Check (checks/s) through the `fencegate serve` binary on one server and on the three-master cluster; server CPU: the fencegate process's (Redis CPU only for the one server).",
		floorHead: "cycles/s ÷ one master",
		rows: []row{
			{id: "cluster/one-node", baseline: "cluster/one-node"},
			{id: "cluster/one-master", baseline: "cluster/one-node"},
			{id: "cluster/three-masters", baseline: "cluster/one-node", floor: "cluster/one-master"},
			{id: "cluster/authz-one-node", baseline: "cluster/authz-one-node"},
			{id: "cluster/authz-three-masters", baseline: "cluster/authz-one-node"},
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
		renderSection(w, s, runs)
	}
}

// renderSection writes one section's table; nothing when none of its rows
// has data.
func renderSection(w io.Writer, s section, runs map[string][]result) {
	us := func(v float64) string { return fmt.Sprintf("%.0f", v/1e3) }
	var lines []string
	for _, r := range s.rows {
		sub := runs[r.id]
		if len(sub) == 0 {
			continue
		}
		base := runs[r.baseline]
		ratioTo := func(base []result, f func(result) float64, withRange bool) string {
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
		redis := "—"
		if m := median(each(sub, storeCPU)); m > 0 {
			redis = us(m)
		}
		cols := []string{r.id, fmt.Sprintf("%.0f", median(each(sub, perSec))),
			us(median(each(sub, p50))), us(median(each(sub, p99))), us(median(each(sub, p999)))}
		addedCPU := totalCPU
		if s.servers {
			addedCPU = serverStoreCPU
			sum := median(each(sub, serverStoreCPU))
			target := "—"
			if r.cpuTarget > 0 {
				verdict := "met"
				if sum > float64(r.cpuTarget) {
					verdict = "missed"
				}
				target = fmt.Sprintf("≤ %s: %s", us(float64(r.cpuTarget)), verdict)
			}
			cols = append(cols, us(median(each(sub, serverCPU))), redis, us(sum), target)
		} else {
			cols = append(cols, us(median(each(sub, cpu))), redis)
		}
		cols = append(cols, r.baseline, ratioTo(base, perSec, true), ratioTo(base, p50, true), ratioTo(base, p99, false), added(p50), added(addedCPU))
		if s.servers {
			cols = append(cols, ratioTo(base, serverCPU, true))
		}
		if s.floorHead != "" {
			floor := "—"
			if r.floor != "" {
				floor = ratioTo(runs[r.floor], perSec, true)
			}
			cols = append(cols, floor)
		}
		if s.luaHead != "" {
			lua := "—"
			if r.lua != "" {
				lua = ratioTo(runs[r.lua], perSec, true)
			}
			cols = append(cols, lua)
		}
		cols = append(cols, fmt.Sprint(len(sub)))
		for _, k := range s.extras {
			cols = append(cols, fmt.Sprintf("%.2f", median(each(sub, func(r result) float64 { return r.Extra[k] }))))
		}
		lines = append(lines, "| "+strings.Join(cols, " | ")+" |")
	}
	if len(lines) == 0 {
		return
	}
	heads := []string{"benchmark", s.unit, "p50 µs", "p99 µs", "p999 µs"}
	if s.servers {
		heads = append(heads, "server CPU µs/op", "Redis CPU µs/op", "server+Redis CPU µs/op", "CPU target µs/op")
	} else {
		heads = append(heads, "CPU µs/op", "Redis CPU µs/op")
	}
	heads = append(heads, "baseline", s.unit+" ratio", "p50 ratio", "p99 ratio", "added p50 µs")
	if s.servers {
		heads = append(heads, "added server+Redis CPU µs/op", "server CPU ratio")
	} else {
		heads = append(heads, "added CPU µs/op")
	}
	if s.floorHead != "" {
		heads = append(heads, s.floorHead)
	}
	if s.luaHead != "" {
		heads = append(heads, s.luaHead)
	}
	heads = append(heads, "runs")
	heads = append(heads, s.extras...)
	align := make([]string, len(heads))
	for i, h := range heads {
		align[i] = "--:"
		if h == "benchmark" || h == "baseline" {
			align[i] = "---"
		}
	}
	fmt.Fprintf(w, "\n## %s\n\n%s\n\n", s.title, s.note)
	fmt.Fprintln(w, "| "+strings.Join(heads, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Join(align, "|")+"|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
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
	if os.Getenv(noopEnv) != "" {
		runNoopAuthz() // the floor of BenchmarkExtAuthz, in its own process
	}
	flag.Parse()
	start := time.Now()
	loadStart := loadAvg()
	code := m.Run()
	results := board.snapshot()
	memBoard.Lock()
	mem := maps.Clone(memBoard.m)
	memBoard.Unlock()
	attackBoard.mu.Lock()
	attacked := len(attackBoard.order) > 0
	attackBoard.mu.Unlock()
	if len(results) == 0 && len(mem) == 0 && !attacked {
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
	renderAttack(&sb)
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
