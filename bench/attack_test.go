package bench

import (
	"bufio"
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/lock"
)

// BenchmarkUnderAttack (issue #19's "done when"): the real `fencegate
// serve` binary, with every listener a deployment has (HTTP lock API and
// forward-auth, gRPC lock API, ext_authz, the fencing proxy) on loopback
// and default limits, is called by a legitimate client — first with no
// attack, then while an unauthenticated attacker, from many loopback
// addresses, holds -attack-conns keep-alive connections on each listener
// (each made one tokenless request, or finished the HTTP/2 handshake, and
// went idle; each reopened as soon as the server closes it) and sends
// -attack-big-calls concurrent tokenless gRPC Acquire calls with a 4 MiB
// key. It reports, per listener, the legitimate client's success rate,
// calls/s and p99 with and without the attack, and the server's RSS.
//
// -attack-binary runs another build (e.g. the commit before the fix) in
// place of this tree's, to measure before and after.
// benchCheckToken is the forward-auth caller's token (operation check),
// as a proxy presents it in Proxy-Authorization.
const benchCheckToken = "bench-check-token"

func BenchmarkUnderAttack(b *testing.B) {
	bin := *attackBinary
	if bin == "" {
		var err error
		if bin, err = fencegateBinary(); err != nil {
			b.Fatal(err)
		}
	}
	s := startAttackTarget(b, bin)
	targets := s.targets(b)

	measure := func(phase string) {
		for _, tg := range targets {
			b.Run(tg.name+"/"+phase, func(b *testing.B) {
				r := runLegit(b.Context(), tg, *attackFor)
				r.rss = rssOf(s.proc.pids()[0])
				b.ReportMetric(r.success()*100, "success-%")
				b.ReportMetric(r.perSec(), "calls/s")
				b.ReportMetric(micros(r.pct(99)), "p99-µs")
				b.ReportMetric(float64(r.rss)/(1<<20), "server-rss-MiB")
				attackBoard.set(tg.name, phase, r)
			})
		}
	}
	attackBoard.setRSS("before", rssOf(s.proc.pids()[0]))
	measure("quiet")

	ctx, stop := context.WithCancel(b.Context())
	var wg sync.WaitGroup
	peak := startRSSPeak(ctx, &wg, s.proc.pids()[0])
	for _, l := range []struct{ name, addr, kind string }{
		{"http", s.proc.addr["http"], "http"},
		{"proxy", s.proc.addr["proxy"], "http"},
		{"grpc", s.proc.addr["grpc"], "grpc"},
		{"authz", s.proc.addr["authz"], "grpc"},
	} {
		for i := range *attackConns {
			wg.Go(func() { holdIdle(ctx, attackerIP(i), l.addr, l.kind) })
		}
	}
	bigCalls(ctx, &wg, b, s.proc.addr["grpc"], *attackBigCalls)
	time.Sleep(*attackSettle) // the flood takes the slots
	attackBoard.setRSS("settled", rssOf(s.proc.pids()[0]))
	measure("attacked")
	stop()
	wg.Wait()
	attackBoard.setRSS("peak", peak.Load())
	attackBoard.attackConns, attackBoard.bigCalls = *attackConns, *attackBigCalls
}

var (
	attackBinary   = flag.String("attack-binary", "", "fencegate binary BenchmarkUnderAttack attacks (default: built from this tree)")
	attackConns    = flag.Int("attack-conns", 1100, "idle connections the attacker holds on each listener")
	attackBigCalls = flag.Int("attack-big-calls", 128, "concurrent tokenless 4 MiB gRPC Acquire calls")
	attackBigEvery = flag.Duration("attack-big-every", 100*time.Millisecond, "least time between one attacker goroutine's 4 MiB calls (0: back to back)")
	attackFor      = flag.Duration("attack-for", 3*time.Second, "how long the legitimate client is measured per listener and phase")
	attackSettle   = flag.Duration("attack-settle", 3*time.Second, "time the attack runs before the legitimate client is measured")
)

// legitTimeout is a legitimate call's deadline: past it the call counts as
// not served (the old listener made callers wait minutes).
const legitTimeout = 2 * time.Second

// attackerIP spreads the attacker's connections over loopback addresses,
// 64 per address (the default per-peer cap), so the flood fills the
// listener's slots rather than one peer's; the legitimate client is
// 127.0.0.1.
func attackerIP(i int) string { return fmt.Sprintf("127.0.%d.%d", 1+i/64/250, 2+i/64%250) }

type attackTarget struct {
	proc     *proc
	upstream string
	held     lock.Held
}

// startAttackTarget runs bin serve on a bolt store with the HTTP, gRPC,
// authz and proxy listeners and the bench token, and holds one lock the
// forward-auth, ext_authz and proxy writes carry the fence of.
func startAttackTarget(tb testing.TB, bin string) *attackTarget {
	tb.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	tb.Cleanup(up.Close)
	sum, checkSum := auth.HashToken(benchToken), auth.HashToken(benchCheckToken)
	dir := tb.TempDir()
	cfg := filepath.Join(dir, "serve.yaml")
	debug := ""
	if *serveDebugAddr != "" {
		debug = "debug:\n  addr: " + *serveDebugAddr + "\n"
	}
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `http:
  addr: 127.0.0.1:0
grpc:
  addr: 127.0.0.1:0
authz:
  addr: 127.0.0.1:0
admission:
  addr: "off"
tokens:
  - name: bench
    sha256: %s
    prefixes: ["bench/"]
  - name: bench-proxy
    sha256: %s
    prefixes: ["bench/"]
    operations: [check]
log:
  level: info
  format: json
proxy:
  addr: 127.0.0.1:0
  routes:
    - name: attack
      prefix: /
      upstream: %s
      key: bench/attack/held
%s`, hex.EncodeToString(sum[:]), hex.EncodeToString(checkSum[:]), up.URL, debug), 0o600); err != nil {
		tb.Fatal(err)
	}
	p := startProc(tb, []string{"FENCEGATE_CONFIG=", "FENCEGATE_STORE=bolt://" + filepath.Join(dir, "locks.db")},
		readyJSON("fencegate ready"), bin, "serve", "--config", cfg)
	hc, err := client.New("http://"+p.addr["http"], client.WithToken(benchToken))
	if err != nil {
		tb.Fatal(err)
	}
	res, err := hc.Acquire(context.Background(), "bench/attack/held", time.Hour)
	if err != nil || !res.OK {
		tb.Fatalf("hold the attack's lock: %v %v", res, err)
	}
	return &attackTarget{proc: p, upstream: up.URL, held: lock.Held{Key: "bench/attack/held", LockID: res.LockID, Fence: res.Fence}}
}

// legitTarget is one listener's legitimate client: connect builds a fresh
// one (new connections, as a caller arriving during the attack has), call
// makes one call with it.
type legitTarget struct {
	name    string
	connect func() (call func(ctx context.Context, w int) error, closeFn func())
}

const legitWorkers = 4

func (s *attackTarget) targets(tb testing.TB) []legitTarget {
	httpBase := "http://" + s.proc.addr["http"]
	newHTTP := func() *http.Client {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = legitWorkers
		tr.DialContext = (&net.Dialer{Timeout: legitTimeout}).DialContext
		return &http.Client{Transport: tr}
	}
	status := func(res *http.Response, err error, want int) error {
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		return nil
	}
	return []legitTarget{
		{"http", func() (func(context.Context, int) error, func()) {
			hc := newHTTP()
			c, err := client.New(httpBase, client.WithToken(benchToken), client.WithHTTPClient(hc))
			if err != nil {
				tb.Fatal(err)
			}
			return cycle(c, workerKeys("attack-http", legitWorkers)), hc.CloseIdleConnections
		}},
		{"forward-auth", func() (func(context.Context, int) error, func()) {
			hc := newHTTP()
			return func(ctx context.Context, _ int) error {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, httpBase+authz.HTTPPath+"/orders/1", nil)
				req.Header.Set(fencewire.HeaderKey, s.held.Key)
				req.Header.Set(fencewire.HeaderToken, s.held.Fence)
				// The proxy's credential (a token with the check operation).
				req.Header.Set("Proxy-Authorization", "Bearer "+benchCheckToken)
				res, err := hc.Do(req)
				return status(res, err, http.StatusOK)
			}, hc.CloseIdleConnections
		}},
		{"proxy", func() (func(context.Context, int) error, func()) {
			hc := newHTTP()
			return func(ctx context.Context, _ int) error {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+s.proc.addr["proxy"]+"/orders/1", strings.NewReader("{}"))
				req.Header.Set(fencewire.HeaderToken, s.held.Fence)
				res, err := hc.Do(req)
				return status(res, err, http.StatusOK)
			}, hc.CloseIdleConnections
		}},
		{"grpc", func() (func(context.Context, int) error, func()) {
			gc, err := client.NewGRPC(s.proc.addr["grpc"], client.WithToken(benchToken))
			if err != nil {
				tb.Fatal(err)
			}
			return cycle(gc, workerKeys("attack-grpc", legitWorkers)), func() { _ = gc.Close() }
		}},
		{"authz", func() (func(context.Context, int) error, func()) {
			conn, err := grpc.NewClient(s.proc.addr["authz"], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				tb.Fatal(err)
			}
			c := authv3.NewAuthorizationClient(conn)
			req := envoyWrite("/orders/1", s.held.Key, s.held.Fence)
			return func(ctx context.Context, _ int) error {
				resp, err := c.Check(ctx, req)
				if err != nil {
					return err
				}
				if got := resp.GetStatus().GetCode(); got != int32(code.Code_OK) {
					return fmt.Errorf("check: code %d", got)
				}
				return nil
			}, func() { _ = conn.Close() }
		}},
	}
}

// legitRun is one listener's legitimate calls in one phase.
type legitRun struct {
	ok, failed int
	elapsed    time.Duration
	lat        []time.Duration // every call's, failed ones included (up to their deadline)
	rss        int64
	firstErr   string
}

func (r legitRun) success() float64 {
	if r.ok+r.failed == 0 {
		return 0
	}
	return float64(r.ok) / float64(r.ok+r.failed)
}

func (r legitRun) perSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok) / r.elapsed.Seconds()
}

func (r legitRun) pct(p float64) time.Duration {
	return sample{lat: r.lat}.pct(p)
}

// runLegit calls tg from legitWorkers workers, each call with
// legitTimeout, for d, on connections opened for this run.
func runLegit(ctx context.Context, tg legitTarget, d time.Duration) legitRun {
	call, closeFn := tg.connect()
	defer closeFn()
	var (
		mu  sync.Mutex
		run legitRun
		wg  sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for w := range legitWorkers {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, legitTimeout)
				t0 := time.Now()
				err := call(cctx, w)
				lat := time.Since(t0)
				cancel()
				mu.Lock()
				run.lat = append(run.lat, lat)
				if err != nil {
					run.failed++
					if run.firstErr == "" {
						run.firstErr = err.Error()
					}
				} else {
					run.ok++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	run.elapsed = time.Since(start)
	slices.Sort(run.lat)
	return run
}

// holdIdle is one attacker connection slot: connect from ip, make one
// tokenless request (HTTP: GET /healthz; gRPC: the HTTP/2 preface and
// SETTINGS, the handshake a health check starts with), then hold the
// connection doing nothing until the server closes it, and reconnect.
func holdIdle(ctx context.Context, ip, addr, kind string) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		if kind == "http" {
			_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			if err == nil {
				if res, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					res.Body.Close()
				}
			}
		} else {
			_, err = c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0))
		}
		if err == nil {
			_, _ = io.Copy(io.Discard, c) // until the server closes it
		}
		stop()
		c.Close()
		sleepCtx(ctx, 10*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// bigCalls sends n concurrent tokenless Acquire calls with a 4 MiB key,
// over 4 connections from attacker addresses, each goroutine calling again
// as soon as its call ends (at most every -attack-big-every). The request is encoded
// once (rawCodec): the bench's own marshalling would otherwise take the
// CPU the server is measured on.
func bigCalls(ctx context.Context, wg *sync.WaitGroup, tb testing.TB, addr string, n int) {
	if n <= 0 {
		return
	}
	b, err := proto.Marshal(&fencegatev1.AcquireRequest{Key: strings.Repeat("k", 4<<20), TtlMs: proto.Int64(30000)})
	if err != nil {
		tb.Fatal(err)
	}
	req := &rawMsg{b: b}
	var conns []*grpc.ClientConn
	for i := range 4 {
		ip := fmt.Sprintf("127.0.200.%d", i+1)
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
				return d.DialContext(ctx, "tcp", a)
			}))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = conn.Close() })
		conns = append(conns, conn)
	}
	for i := range n {
		wg.Go(func() {
			conn := conns[i%len(conns)]
			for ctx.Err() == nil {
				t0 := time.Now()
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_ = conn.Invoke(cctx, fencegatev1.Locks_Acquire_FullMethodName, req, &rawMsg{}, grpc.ForceCodecV2(rawCodec{}))
				cancel()
				if wait := *attackBigEvery - time.Since(t0); wait > 0 {
					sleepCtx(ctx, wait)
				}
			}
		})
	}
}

// rawMsg is a message already encoded; rawCodec sends it as it is and
// drops replies.
type rawMsg struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*rawMsg).b)}, nil
}
func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (rawCodec) Name() string                         { return "proto" }

// rssOf is pid's resident set size in bytes (/proc/<pid>/status VmRSS).
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// startRSSPeak samples pid's RSS every 50 ms until ctx ends and keeps the
// largest.
func startRSSPeak(ctx context.Context, wg *sync.WaitGroup, pid int) *atomic.Int64 {
	var peak atomic.Int64
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if r := rssOf(pid); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return &peak
}

// attackBoard keeps BenchmarkUnderAttack's figures for the report.
var attackBoard = &attackResults{runs: map[string]map[string]legitRun{}, rss: map[string]int64{}}

type attackResults struct {
	mu                    sync.Mutex
	order                 []string
	runs                  map[string]map[string]legitRun // listener → phase → run
	rss                   map[string]int64
	attackConns, bigCalls int
}

func (a *attackResults) set(listener, phase string, r legitRun) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runs[listener] == nil {
		a.runs[listener] = map[string]legitRun{}
		a.order = append(a.order, listener)
	}
	a.runs[listener][phase] = r
}

func (a *attackResults) setRSS(when string, v int64) {
	a.mu.Lock()
	a.rss[when] = v
	a.mu.Unlock()
}

// renderAttack writes BenchmarkUnderAttack's section; nothing when it did
// not run.
func renderAttack(w io.Writer) {
	a := attackBoard
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.order) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## 5. Legitimate callers while an unauthenticated attacker floods every listener (issue #19)\n\n")
	fmt.Fprintf(w, "`fencegate serve` (bolt store, default connection limits) with the HTTP, gRPC, authz and proxy listeners. Attack: %d idle keep-alive connections per listener from %d loopback addresses (HTTP: one tokenless GET /healthz each; gRPC: the HTTP/2 handshake), each reopened as soon as the server closes it, plus %d concurrent tokenless gRPC Acquire calls with a 4 MiB key. "+
		"The legitimate client (%d workers, 127.0.0.1) opens fresh connections for each run; a call not answered within %v fails. calls/s counts successes; p99 includes failed calls (at their deadline).\n\n",
		a.attackConns, (a.attackConns+63)/64, a.bigCalls, legitWorkers, legitTimeout)
	fmt.Fprintf(w, "| listener | success quiet | success attacked | calls/s quiet | calls/s attacked | p99 quiet | p99 attacked | first error attacked |\n|---|--:|--:|--:|--:|--:|--:|---|\n")
	for _, l := range a.order {
		q, at := a.runs[l]["quiet"], a.runs[l]["attacked"]
		fmt.Fprintf(w, "| %s | %.1f%% | %.1f%% | %.0f | %.0f | %s | %s | %s |\n", l, q.success()*100, at.success()*100, q.perSec(), at.perSec(),
			q.pct(99).Round(10*time.Microsecond), at.pct(99).Round(10*time.Microsecond), truncateErr(at.firstErr))
	}
	mib := func(v int64) string { return fmt.Sprintf("%.0f MiB", float64(v)/(1<<20)) }
	fmt.Fprintf(w, "\nServer RSS: %s before the attack, %s once it settled, %s peak during it (sampled every 50 ms).\n",
		mib(a.rss["before"]), mib(a.rss["settled"]), mib(a.rss["peak"]))
}

func truncateErr(s string) string {
	if s == "" {
		return "—"
	}
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strings.ReplaceAll(s, "|", "/")
}

// TestUnderAttackSetup runs BenchmarkUnderAttack's setup at a small scale:
// every legitimate target succeeds with and without a small attack, and a
// tokenless 4 MiB Acquire is refused UNAUTHENTICATED.
func TestUnderAttackSetup(t *testing.T) {
	bin, err := fencegateBinary()
	if err != nil {
		t.Fatal(err)
	}
	s := startAttackTarget(t, bin)
	targets := s.targets(t)
	check := func(phase string) {
		for _, tg := range targets {
			if r := runLegit(t.Context(), tg, 300*time.Millisecond); r.ok == 0 || r.failed > 0 {
				t.Errorf("%s %s: %d ok, %d failed (%s)", tg.name, phase, r.ok, r.failed, r.firstErr)
			}
		}
	}
	check("quiet")
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for _, l := range []struct{ addr, kind string }{{s.proc.addr["http"], "http"}, {s.proc.addr["grpc"], "grpc"}} {
		for i := range 10 {
			wg.Go(func() { holdIdle(ctx, attackerIP(i*64), l.addr, l.kind) })
		}
	}
	bigCalls(ctx, &wg, t, s.proc.addr["grpc"], 2)
	check("attacked")

	conn, err := grpc.NewClient(s.proc.addr["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = fencegatev1.NewLocksClient(conn).Acquire(t.Context(), &fencegatev1.AcquireRequest{Key: strings.Repeat("k", 4<<20), TtlMs: proto.Int64(30000)})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("tokenless 4 MiB acquire: %v, want Unauthenticated", err)
	}
}
