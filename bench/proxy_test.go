package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/cmd/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/deploy/nginx/nginxtest"
)

// BenchmarkProxy: a write through `fencegate proxy` (the real binary, on
// the Redis store) with the barrier off and on, against the floor of a
// plain httputil.ReverseProxy in its own process, and against the peer
// setup of nginx with fencegate's forward-auth (the shipped nginx.conf in
// front of `fencegate serve`). Every subject forwards to the same upstream,
// which answers at once. Besides throughput and latency each run reports
// the CPU time the edge's processes and Redis spent per request, and the
// Redis calls per write.
func BenchmarkProxy(b *testing.B) { runSuite(b, proxySuite) }

// floorEnv makes the test binary, re-executed, run the floor proxy (see
// TestMain): a plain httputil.ReverseProxy to the URL it names.
const floorEnv = "FENCEGATE_BENCH_FLOOR_UPSTREAM"

// runFloorProxy is the floor's process: httputil.ReverseProxy with the
// default transport, nothing else. It prints its address and serves until
// its stdin closes (the bench process exited or killed it).
func runFloorProxy(upstream string) {
	u, err := url.Parse(upstream)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: tr,
	}
	srv := httptest.NewUnstartedServer(rp)
	srv.Start()
	fmt.Printf("floor ready %s\n", srv.Listener.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// upstreamHandler is the protected API of every proxy subject: it reads
// the body and answers 200 at once.
func upstreamHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(w, "stored\n")
}

// fencegateBinary is cmd/fencegate, built once per process or by `make`
// (fencegatetest.Binary).
var fencegateBinary = fencegatetest.Binary

// proc is a child process the bench started and measures.
type proc struct {
	cmd  *exec.Cmd
	addr map[string]string
}

// pids is the process's pid, for a subject's server meter.
func (p *proc) pids() []int { return []int{p.cmd.Process.Pid} }

// startProc runs name args… and waits for a stdout/stderr line that ready
// accepts; ready returns the listener addresses it reads from the line.
// Output after that is discarded. The process is stopped at cleanup.
func startProc(tb testing.TB, env []string, ready func(line string) map[string]string, name string, args ...string) *proc {
	tb.Helper()
	cmd := exec.Command(name, args...)
	// Killed with the bench process even when cleanup never runs (a
	// -timeout panic): `fencegate serve` does not watch its stdin.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(done) }()
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	found := make(chan map[string]string, 1)
	var seen strings.Builder
	var seenMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if a := ready(sc.Text()); a != nil {
				found <- a
				break
			}
			seenMu.Lock()
			seen.WriteString(sc.Text() + "\n")
			seenMu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-found:
		return &proc{cmd: cmd, addr: a}
	case <-done:
	case <-time.After(60 * time.Second):
	}
	seenMu.Lock()
	defer seenMu.Unlock()
	tb.Fatalf("%s did not get ready:\n%s", name, seen.String())
	return nil
}

// readyJSON accepts fencegate's JSON ready line whose msg starts with msg.
func readyJSON(msg string) func(string) map[string]string {
	return func(line string) map[string]string {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || !strings.HasPrefix(fmt.Sprint(m["msg"]), msg) {
			return nil
		}
		out := map[string]string{}
		for k, v := range m {
			if s, ok := v.(string); ok {
				out[k] = s
			}
		}
		return out
	}
}

// cpuTicks is the user+system CPU time of pid in clock ticks
// (/proc/<pid>/stat fields 14 and 15).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces; fields count from
	// after its closing parenthesis.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, nil
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times (100 on every
// Linux ABI Go supports).
const clockTick = 10 * time.Millisecond

// children lists the pids whose parent is ppid.
func children(ppid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// redisStats reads Redis's own CPU time (seconds) and the calls of the
// commands a client sends as round trips: scripts (EVALSHA, EVAL; the
// barrier's Finish is one too). Commands a script runs inside Redis are
// counted by INFO under their own names and are not round trips, so they
// are left out.
func redisStats(ctx context.Context, c *goredis.Client) (cpu float64, calls map[string]int64, err error) {
	info, err := c.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return 0, nil, err
	}
	calls = map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		case strings.HasPrefix(k, "cmdstat_"):
			name := strings.TrimPrefix(k, "cmdstat_")
			if name != "evalsha" && name != "eval" {
				continue
			}
			for _, kv := range strings.Split(v, ",") {
				if n, ok := strings.CutPrefix(kv, "calls="); ok {
					calls[name], _ = strconv.ParseInt(n, 10, 64)
				}
			}
		}
	}
	return cpu, calls, nil
}

// procMeter measures the CPU of pids() (read at the start of each run) and
// Redis, and Redis round trips, per call of a run.
func procMeter(tb testing.TB, rc *goredis.Client, pids func() []int) func() func(n int) map[string]float64 {
	return func() func(int) map[string]float64 {
		ps := pids()
		ticks := func() int64 {
			var sum int64
			for _, p := range ps {
				t, err := cpuTicks(p)
				if err != nil {
					tb.Errorf("cpu of pid %d: %v", p, err)
				}
				sum += t
			}
			return sum
		}
		t0 := ticks()
		var rcpu0 float64
		var calls0 map[string]int64
		if rc != nil {
			var err error
			if rcpu0, calls0, err = redisStats(context.Background(), rc); err != nil {
				tb.Errorf("redis INFO: %v", err)
			}
		}
		return func(n int) map[string]float64 {
			cpu := time.Duration(ticks()-t0) * clockTick
			out := map[string]float64{}
			var trips float64
			if rc != nil {
				rcpu1, calls1, err := redisStats(context.Background(), rc)
				if err != nil {
					tb.Errorf("redis INFO: %v", err)
				}
				cpu += time.Duration((rcpu1 - rcpu0) * float64(time.Second))
				for k, v := range calls1 {
					trips += float64(v - calls0[k])
				}
			}
			if n > 0 {
				out[extraCPU] = micros(cpu) / float64(n)
				out[extraCalls] = trips / float64(n)
			}
			return out
		}
	}
}

// The extra metrics of a proxy run.
const (
	extraCPU   = "cpu-µs/req"
	extraCalls = "redis-calls/req"
)

// proxySuite: the floor, fencegate proxy with the barrier off and on, and
// nginx + forward-auth, each forwarding a PUT carrying the current fence of
// a lock its worker holds to the same upstream.
func proxySuite(tb testing.TB, nw int) []subject {
	bin, err := fencegateBinary()
	if err != nil {
		tb.Fatal(err)
	}
	store := openRedis(tb)
	rc := store.Client()
	app := httptest.NewServer(http.HandlerFunc(upstreamHandler))
	tb.Cleanup(app.Close)

	storeURL := redisStoreURL(tb, store)

	cfg := filepath.Join(tb.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`check:
  timeout: %[2]s
proxy:
  addr: 127.0.0.1:0
  routes:
    - name: off
      prefix: /off
      upstream: %[1]s
    - name: barrier
      prefix: /barrier
      upstream: %[1]s
      barrier: true
`, app.URL, benchCheckTimeout)), 0o600); err != nil {
		tb.Fatal(err)
	}
	jsonInfo := []string{"--log-format", "json", "--log-level", "info"}
	fp := startProc(tb, []string{"FENCEGATE_CONFIG="}, readyJSON("fencegate proxy ready"), bin,
		append([]string{"proxy", "--config", cfg, "--store", storeURL}, jsonInfo...)...)
	serveCfg := filepath.Join(tb.TempDir(), "serve.yaml")
	if err := os.WriteFile(serveCfg, []byte(fmt.Sprintf("check:\n  timeout: %s\n", benchCheckTimeout)), 0o600); err != nil {
		tb.Fatal(err)
	}
	gw := startProc(tb, []string{"FENCEGATE_CONFIG="}, readyJSON("fencegate ready"), bin,
		append([]string{"serve", "--config", serveCfg, "--store", storeURL, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--authz-addr", "127.0.0.1:0"}, jsonInfo...)...)
	edge := nginxtest.Start(tb, gw.addr["http"], strings.TrimPrefix(app.URL, "http://"))
	floor := startProc(tb, []string{floorEnv + "=" + app.URL}, func(line string) map[string]string {
		if a, ok := strings.CutPrefix(line, "floor ready "); ok {
			return map[string]string{"addr": a}
		}
		return nil
	}, os.Args[0], "-test.run=^$")

	hc := &http.Client{Transport: func() *http.Transport {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 2*nw, 2*nw
		return tr
	}()}
	tb.Cleanup(hc.CloseIdleConnections)

	keys := workerKeys("proxy", nw)
	held := holdWorkerLocks(tb, store, keys) // each worker's lock and current fence
	write := func(base, prefix string) op {
		return func(ctx context.Context, w int) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+prefix+"/"+keys[w], strings.NewReader(`{"v":1}`))
			if err != nil {
				return err
			}
			req.Header.Set(client.HeaderKey, keys[w])
			req.Header.Set(client.HeaderToken, held[w].Fence)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("PUT %s%s: %d %s", prefix, keys[w], resp.StatusCode, resp.Header.Get("X-Fence-Reason"))
			}
			return nil
		}
	}
	self := os.Getpid()
	nginxPids := func() []int {
		var out []int
		for _, p := range children(self) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(b)) == "nginx" {
				out = append(out, p)
				out = append(out, children(p)...)
			}
		}
		return out
	}
	fpURL := "http://" + fp.addr["proxy"]
	return []subject{
		{id: "proxy/floor", unit: "writes/s", op: write("http://"+floor.addr["addr"], "/w"),
			meter: procMeter(tb, nil, func() []int { return []int{floor.cmd.Process.Pid} })},
		{id: "proxy/fencegate", unit: "writes/s", op: write(fpURL, "/off"),
			meter: procMeter(tb, rc, func() []int { return []int{fp.cmd.Process.Pid} })},
		{id: "proxy/fencegate-barrier", unit: "writes/s", op: write(fpURL, "/barrier"),
			meter: procMeter(tb, rc, func() []int { return []int{fp.cmd.Process.Pid} })},
		{id: "proxy/nginx-forward-auth", unit: "writes/s", op: write(edge, "/w"),
			meter: procMeter(tb, rc, func() []int { return append(nginxPids(), gw.cmd.Process.Pid) })},
	}
}
