package e2e

// Helpers for the tests that make a store lose writes (failover_test.go):
// a load of clients that records every fence the gateway hands out and
// checks them, a TCP proxy that can cut a link or play a dead host, and
// child processes (redis-server, redis-sentinel, PostgreSQL) that the test
// kills with SIGKILL.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// floorCase is one row of the table every store-loses-writes test runs:
// with the fence clock floor (the default) no fence may repeat; with
// fenceFloor=off fences must repeat, which shows the test can fail.
type floorCase struct {
	name string
	off  bool
}

var floorCases = []floorCase{{"floor_on", false}, {"floor_off", true}}

// params is the store URL parameter that turns the floor off, or nothing.
func (fc floorCase) params() url.Values {
	if fc.off {
		return url.Values{backend.FenceFloorParam: {backend.FloorOff.String()}}
	}
	return url.Values{}
}

// failoverRounds is how many times a test makes its store lose writes:
// FENCEGATE_FAILOVER_ROUNDS (a longer, Jepsen-style run), 1 by default.
func failoverRounds(t *testing.T) int {
	t.Helper()
	v := os.Getenv("FENCEGATE_FAILOVER_ROUNDS")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("FENCEGATE_FAILOVER_ROUNDS=%q: want a positive integer", v)
	}
	return n
}

// Load shape: as in issue #18's measurements, 8 clients on 4 keys.
const (
	loadClients = 8
	loadKeys    = 4
	// loadTTL bounds how long a lock the store lost the release of (it
	// came back from an older copy) keeps its key busy.
	loadTTL = 2 * time.Second
	// loadCallTimeout bounds one acquire while the store is away.
	loadCallTimeout = 2 * time.Second
)

// grant is one fence the gateway handed out, with when the acquire was
// sent and when its reply arrived.
type grant struct {
	fence          int64
	sent, answered time.Time
}

// fenceLoad runs loadClients clients that acquire and release locks on
// loadKeys keys through a gateway's HTTP lock API, as fast as they can,
// and records every granted fence.
type fenceLoad struct {
	t      *testing.T
	keys   []string
	api    atomic.Pointer[client.Client]
	gate   sync.RWMutex // held for writing by pause: no acquire in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	grants map[string][]grant
	why    map[string]int // failed acquires by reason
	total  atomic.Int64   // grants so far
	failed atomic.Int64   // acquires that got an error (store away, gateway down)
	busy   atomic.Int64   // acquires answered "locked"
}

func startFenceLoad(t *testing.T, gatewayURL string) *fenceLoad {
	t.Helper()
	var keys []string
	for i := range loadKeys {
		keys = append(keys, fmt.Sprintf("failover/k%d", i))
	}
	return startFenceLoadOn(t, gatewayURL, keys)
}

// startFenceLoadOn is startFenceLoad on the given keys (e.g. keys of one
// cluster shard).
func startFenceLoadOn(t *testing.T, gatewayURL string, keys []string) *fenceLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &fenceLoad{t: t, cancel: cancel, grants: map[string][]grant{}, why: map[string]int{}, keys: keys}
	l.setGateway(gatewayURL)
	for range loadClients {
		l.wg.Add(1)
		go l.work(ctx)
	}
	t.Cleanup(l.stop)
	return l
}

// setGateway points the clients at another gateway (a restarted one).
func (l *fenceLoad) setGateway(base string) {
	c, err := client.New(base)
	if err != nil {
		l.t.Fatal(err)
	}
	l.api.Store(c)
}

func (l *fenceLoad) work(ctx context.Context) {
	defer l.wg.Done()
	for ctx.Err() == nil {
		l.gate.RLock()
		c := l.api.Load()
		key := l.keys[rand.IntN(len(l.keys))]
		cctx, cancel := context.WithTimeout(ctx, loadCallTimeout)
		sent := time.Now()
		res, err := c.Acquire(cctx, key, loadTTL)
		answered := time.Now()
		if err == nil && res.OK {
			f, perr := lockstore.ParseFence(res.Fence)
			if perr != nil {
				l.t.Errorf("acquire %s: fence %q: %v", key, res.Fence, perr)
			}
			l.mu.Lock()
			l.grants[key] = append(l.grants[key], grant{f, sent, answered})
			l.mu.Unlock()
			l.total.Add(1)
			_, _ = c.Release(cctx, res.LockID)
		}
		cancel()
		l.gate.RUnlock()
		switch {
		case err != nil:
			l.failed.Add(1)
			if ctx.Err() == nil {
				l.mu.Lock()
				l.why[failReason(err)]++
				l.mu.Unlock()
			}
			sleepCtx(ctx, 20*time.Millisecond)
		case !res.OK:
			l.busy.Add(1)
			sleepCtx(ctx, 2*time.Millisecond)
		}
	}
}

// hashes is a key or lockId hash in an error, left out so that one reason
// is counted once.
var hashes = regexp.MustCompile(`(keyHash|lockIdHash)=[0-9a-f]+`)

func failReason(err error) string {
	msg := hashes.ReplaceAllString(err.Error(), "$1=…")
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return msg
}

// reasons is why acquires failed, most frequent first.
func (l *fenceLoad) reasons() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	type kv struct {
		why string
		n   int
	}
	var all []kv
	for w, n := range l.why {
		all = append(all, kv{w, n})
	}
	slices.SortFunc(all, func(a, b kv) int { return b.n - a.n })
	var sb strings.Builder
	for i, e := range all {
		if i == 5 {
			fmt.Fprintf(&sb, "\n\t… %d other reasons", len(all)-i)
			break
		}
		fmt.Fprintf(&sb, "\n\t%6d× %s", e.n, e.why)
	}
	return sb.String()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// pause waits for the acquires in flight and holds the next ones back
// until resume.
func (l *fenceLoad) pause()  { l.gate.Lock() }
func (l *fenceLoad) resume() { l.gate.Unlock() }

// phaseMin is how many acquires each phase must grant at least: a phase
// that falls short runs on (up to phaseBound) until it has. A blip right
// after the store came back (a pool still failing fast on the last dial
// error, keys held by locks whose release was lost) may pass without a
// grant; a gateway that never finds its store again fails the test.
const (
	phaseMin   = 20
	phaseBound = 30 * time.Second
)

// run lets the clients work for d, and on until the phase has granted at
// least phaseMin acquires.
func (l *fenceLoad) run(ctx context.Context, d time.Duration, what string) {
	l.t.Helper()
	want := l.total.Load() + phaseMin
	sleepCtx(ctx, d)
	if ctx.Err() != nil {
		l.t.Fatalf("%s: %v", what, ctx.Err())
	}
	if l.total.Load() >= want {
		return
	}
	deadline := time.Now().Add(phaseBound)
	for l.total.Load() < want {
		if time.Now().After(deadline) || ctx.Err() != nil {
			l.t.Fatalf("%s: fewer than %d acquires granted in %v (%d failed and %d found the key locked so far); why they failed:%s",
				what, phaseMin, d+phaseBound, l.failed.Load(), l.busy.Load(), l.reasons())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitGrants waits (up to bound) until n more acquires have succeeded.
func (l *fenceLoad) waitGrants(ctx context.Context, n int64, bound time.Duration, what string) {
	l.t.Helper()
	want := l.total.Load() + n
	deadline := time.Now().Add(bound)
	for l.total.Load() < want {
		if time.Now().After(deadline) || ctx.Err() != nil {
			l.t.Fatalf("waited %v for %s (%d failed and %d found the key locked so far); why they failed:%s",
				bound, what, l.failed.Load(), l.busy.Load(), l.reasons())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (l *fenceLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// fenceTally is what the fences handed out show.
type fenceTally struct {
	Acquires int64 // granted
	Failed   int64 // acquires that got an error
	Busy     int64 // acquires that found the key locked
	// Gap is the longest stretch without a grant on any key, from one
	// grant's reply to the next.
	Gap      time.Duration
	Repeats  int64 // grants whose fence the key had already been given
	Backward int64 // grants whose fence is not above one answered before they were sent
}

func (ft fenceTally) String() string {
	return fmt.Sprintf("%d acquires granted (%d failed, %d found the key locked), %d repeated fences, %d backward steps",
		ft.Acquires, ft.Failed, ft.Busy, ft.Repeats, ft.Backward)
}

// tally stops the clients and checks every key's fences: a repeat is a
// grant whose fence the key had been given before; a backward step is a
// grant B for which some grant A of the same key was answered before B was
// sent and fence(A) >= fence(B).
func (l *fenceLoad) tally() fenceTally {
	l.stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	ft := fenceTally{Failed: l.failed.Load(), Busy: l.busy.Load()}
	var answers []time.Time
	for _, gs := range l.grants {
		for _, g := range gs {
			answers = append(answers, g.answered)
		}
		ft.Acquires += int64(len(gs))
		seen := make(map[int64]bool, len(gs))
		for _, g := range gs {
			if seen[g.fence] {
				ft.Repeats++
			}
			seen[g.fence] = true
		}
		byAnswer := slices.Clone(gs)
		slices.SortFunc(byAnswer, func(a, b grant) int { return a.answered.Compare(b.answered) })
		bySent := slices.Clone(gs)
		slices.SortFunc(bySent, func(a, b grant) int { return a.sent.Compare(b.sent) })
		var top int64 // the largest fence answered before the current one was sent
		j := 0
		for _, b := range bySent {
			for j < len(byAnswer) && byAnswer[j].answered.Before(b.sent) {
				top = max(top, byAnswer[j].fence)
				j++
			}
			if top >= b.fence {
				ft.Backward++
			}
		}
	}
	slices.SortFunc(answers, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(answers); i++ {
		ft.Gap = max(ft.Gap, answers[i].Sub(answers[i-1]))
	}
	return ft
}

// check asserts the table's expectation: no repeat and no backward step
// with the floor; at least one repeat without it.
func (ft fenceTally) check(t *testing.T, fc floorCase) {
	t.Helper()
	if ft.Acquires == 0 {
		t.Fatalf("no acquire succeeded")
	}
	if fc.off {
		if ft.Repeats == 0 {
			t.Errorf("fenceFloor=off: no fence repeated (%v); the scenario did not make the store lose fences, so it proves nothing with the floor on", ft)
		}
		return
	}
	if ft.Repeats != 0 || ft.Backward != 0 {
		t.Errorf("with the clock floor: %v; want no repeat and no backward step", ft)
	}
}

// tcpProxy forwards every connection to its fixed loopback address on to
// target. cut refuses and drops the connections from some source addresses
// (a partition); down closes the listener and every connection (the host
// is gone) until up.
type tcpProxy struct {
	t      testing.TB
	Addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[*proxyConn]struct{}
	cutFn func(srcIP string) bool
}

type proxyConn struct {
	src                string
	client, downstream net.Conn
}

func (pc *proxyConn) close() {
	pc.client.Close()
	pc.downstream.Close()
}

func newTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln := testutil.Listen(t)
	p := &tcpProxy{t: t, Addr: ln.Addr().String(), target: target, conns: map[*proxyConn]struct{}{}}
	p.ln = ln
	go p.serve(ln)
	t.Cleanup(p.down)
	return p
}

// Port is the proxy's port.
func (p *tcpProxy) Port() int {
	_, port, _ := net.SplitHostPort(p.Addr)
	n, _ := strconv.Atoi(port)
	return n
}

func (p *tcpProxy) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		src, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		p.mu.Lock()
		refused := p.ln != ln || (p.cutFn != nil && p.cutFn(src))
		p.mu.Unlock()
		if refused {
			c.Close()
			continue
		}
		go p.forward(ln, c, src)
	}
}

func (p *tcpProxy) forward(ln net.Listener, c net.Conn, src string) {
	d, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		c.Close()
		return
	}
	pc := &proxyConn{src: src, client: c, downstream: d}
	p.mu.Lock()
	if p.ln != ln || (p.cutFn != nil && p.cutFn(src)) {
		p.mu.Unlock()
		pc.close()
		return
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(d, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, d); done <- struct{}{} }()
	<-done
	pc.close()
	<-done
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// cut drops the connections from the source addresses match accepts and
// refuses new ones from them (for good: the scenarios kill the node behind
// a cut link).
func (p *tcpProxy) cut(match func(srcIP string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutFn = match
	for pc := range p.conns {
		if match(pc.src) {
			pc.close()
		}
	}
}

// down closes the listener and every connection: connecting to Addr is
// refused, as to a host that died.
func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for pc := range p.conns {
		pc.close()
	}
}

// up listens on Addr again.
func (p *tcpProxy) up() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port may linger a moment after down
		if ln, err = net.Listen("tcp", p.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("proxy: listen again on %s: %v", p.Addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.cutFn = nil
	p.mu.Unlock()
	go p.serve(ln)
}

// proc is a child process the test ends with SIGKILL (at the latest when
// the test ends). Its output goes to log.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(t *testing.T, name, log string, argv ...string) *proc {
	t.Helper()
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, tailFile(log, 40))
		}
	})
	return p
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s (pid %d) still running 30s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

func tailFile(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// needTool fails the test (never skips it) when an executable is missing,
// naming the package that installs it.
func needTool(t testing.TB, name, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s not found (%v): install it (apt-get install -y %s)", name, err, pkg)
	}
}

// waitDial waits until addr accepts TCP connections.
func waitDial(t *testing.T, ctx context.Context, addr string, bound time.Duration) {
	t.Helper()
	testutil.WaitFor(t, bound, addr+" to accept connections", func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}
