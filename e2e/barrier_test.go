package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
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

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/lockstore"
)

// The proof of issue 13: through the real `fencegate proxy`, with writes
// that take the upstream 0–300 ms to commit and locks that change hands
// while writes are still in flight, the write barrier keeps the upstream
// from ever having writes of two fences of one key in flight at once, and
// its commits of a key follow fence order. The same workload with the
// barrier off shows both kinds of violation (the proof can fail).

// upWrite is one write as the upstream saw it. arrive and commit are
// positions in the upstream's single event sequence (taken under one
// mutex), so "in flight at the same time" is exact, not a clock comparison.
type upWrite struct {
	key, fence         string
	arrive, commit     int64 // commit is 0 while the write is held
	arriveAt, commitAt time.Time
}

// holdingUpstream is the protected API: it records every write's arrival,
// holds it (hold), then records its commit and answers. A write is "in
// flight at the upstream" from its arrival to its commit.
type holdingUpstream struct {
	hold func(*http.Request)

	mu       sync.Mutex
	seq      int64
	writes   []upWrite
	inflight int
	leaks    []string
}

// randomHold holds each write a random 0–max before it commits.
func randomHold(limit time.Duration) func(*http.Request) {
	return func(*http.Request) { time.Sleep(rand.N(limit + 1)) }
}

func (u *holdingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		fmt.Fprintln(w, "read")
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	verified := r.Header.Get("X-Fence-Verified")
	u.mu.Lock()
	if r.Header.Get(client.HeaderLockID) != "" {
		u.leaks = append(u.leaks, "x-fence-lock-id reached the upstream")
	}
	if verified == "" || verified != r.Header.Get(client.HeaderToken) {
		u.leaks = append(u.leaks, fmt.Sprintf("write arrived with x-fence-verified %q for presented %q", verified, r.Header.Get(client.HeaderToken)))
	}
	u.seq++
	i := len(u.writes)
	u.writes = append(u.writes, upWrite{key: strings.TrimPrefix(r.URL.Path, "/"), fence: verified, arrive: u.seq, arriveAt: time.Now()})
	u.inflight++
	u.mu.Unlock()

	u.hold(r)

	u.mu.Lock()
	u.seq++
	u.writes[i].commit, u.writes[i].commitAt = u.seq, time.Now()
	u.inflight--
	u.mu.Unlock()
	fmt.Fprintln(w, "stored")
}

// committed counts the writes that have committed.
func (u *holdingUpstream) committed() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.writes) - u.inflight
}

// arrived counts the writes of key that have arrived (committed or not).
func (u *holdingUpstream) arrived(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, w := range u.writes {
		if w.key == key {
			n++
		}
	}
	return n
}

// settle waits until no write is held and returns a copy of the record.
func (u *holdingUpstream) settle(t *testing.T) []upWrite {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		u.mu.Lock()
		n := u.inflight
		if n == 0 {
			ws := slices.Clone(u.writes)
			for _, l := range u.leaks {
				t.Error(l)
			}
			u.mu.Unlock()
			return ws
		}
		u.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("the upstream still holds %d writes after 60s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// verdict is what the upstream's record shows.
type verdict struct {
	writes int // writes that reached the upstream and committed
	fences int // distinct (key, fence) among them: how often keys changed hands
	// overlaps counts writes that were in flight at the upstream while a
	// write under another fence of the same key was.
	overlaps int
	// inversions counts commits under a fence lower than one the key had
	// already committed.
	inversions int
	// worst is the longest time two writes of different fences of one
	// key were in flight together.
	worst time.Duration
}

func (v verdict) String() string {
	return fmt.Sprintf("%d writes under %d fences: %d in flight together with another fence's write (worst overlap %s), %d commits out of fence order",
		v.writes, v.fences, v.overlaps, v.worst.Round(time.Millisecond), v.inversions)
}

// analyse checks, per key, that no two writes of different fences were in
// flight at once and that commits follow fence order. Fences are 15-digit
// zero-padded strings, so string order is fence order.
func analyse(ws []upWrite) verdict {
	var v verdict
	byKey := map[string][]int{}
	for i, w := range ws {
		if w.commit == 0 {
			continue
		}
		byKey[w.key] = append(byKey[w.key], i)
	}
	for _, idx := range byKey {
		v.writes += len(idx)
		type event struct {
			seq    int64
			i      int
			arrive bool
		}
		evs := make([]event, 0, 2*len(idx))
		fences := map[string]bool{}
		for _, i := range idx {
			evs = append(evs, event{ws[i].arrive, i, true}, event{ws[i].commit, i, false})
			fences[ws[i].fence] = true
		}
		v.fences += len(fences)
		slices.SortFunc(evs, func(a, b event) int { return int(a.seq - b.seq) })
		open := map[int]bool{}
		bad := map[int]bool{}
		for _, e := range evs {
			if !e.arrive {
				delete(open, e.i)
				continue
			}
			w := ws[e.i]
			for j := range open {
				if ws[j].fence == w.fence {
					continue
				}
				bad[j], bad[e.i] = true, true
				end := w.commitAt
				if ws[j].commitAt.Before(end) {
					end = ws[j].commitAt
				}
				v.worst = max(v.worst, end.Sub(w.arriveAt))
			}
			open[e.i] = true
		}
		v.overlaps += len(bad)

		slices.SortFunc(idx, func(a, b int) int { return int(ws[a].commit - ws[b].commit) })
		highest := ""
		for _, i := range idx {
			if ws[i].fence < highest {
				v.inversions++
			} else {
				highest = ws[i].fence
			}
		}
	}
	return v
}

// workload is the workload: holders take locks on a few keys
// through the gateways' lock API with a short TTL and hand them over every
// few hundred ms (releasing while their writes are still in flight); some
// stall past their TTL and then still write; writers send writes under the
// key's current holder's fence through the proxies, retrying on 429.
type workload struct {
	gateways []string // lock API base URLs; each acquire and release picks one
	proxies  []string // proxy base URLs; each write picks one
	prefix   string   // the proxy route's prefix ("/on"); keys are "on/k0"…
	keys     int
	writers  int
	target   int           // stop once the upstream has committed this many writes
	limit    time.Duration // …or after this long
	up       *holdingUpstream
}

// Holders' timing. A stall outlasts the TTL and the liveness tolerance.
const (
	barrierTTL      = 1500 * time.Millisecond
	barrierStall    = barrierTTL + lockstore.TimeToleranceMs*time.Millisecond + 300*time.Millisecond
	barrierHoldMin  = 150 * time.Millisecond
	barrierHoldSpan = 250 * time.Millisecond
)

// workloadStats counts what the writers and holders saw.
type workloadStats struct {
	ok, stale, draining, unavailable, other atomic.Int64
	issued, stalledWrites                   atomic.Int64
	stalledAdmitted                         atomic.Int64
	elapsed                                 time.Duration
}

func (s *workloadStats) String() string {
	return fmt.Sprintf("clients saw %d admitted, %d stale (409), %d draining (429), %d unavailable (503), %d other; %d fences issued, %d holders stalled past their TTL (%d of their writes admitted)",
		s.ok.Load(), s.stale.Load(), s.draining.Load(), s.unavailable.Load(), s.other.Load(),
		s.issued.Load(), s.stalledWrites.Load(), s.stalledAdmitted.Load())
}

func (wl workload) lockKey(k int) string {
	return fmt.Sprintf("%s/k%d", strings.TrimPrefix(wl.prefix, "/"), k)
}

// send is one write through proxy; it returns the status (-1: no answer).
func send(hc *http.Client, proxy, lockKey, fence string, hdr http.Header) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, proxy+"/"+lockKey, strings.NewReader(`{"v":1}`))
	req.Header.Set(client.HeaderKey, lockKey)
	req.Header.Set(client.HeaderToken, fence)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		return -1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func newWriteClient(conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 2*conns, conns
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// run drives the workload until the target or the limit.
func (wl workload) run(t *testing.T) *workloadStats {
	t.Helper()
	var lockAPIs []*client.Client
	for _, g := range wl.gateways {
		c, err := client.New(g)
		if err != nil {
			t.Fatal(err)
		}
		lockAPIs = append(lockAPIs, c)
	}
	hc := newWriteClient(wl.writers)
	defer hc.CloseIdleConnections()
	st := &workloadStats{}
	current := make([]atomic.Pointer[string], wl.keys) // the fence writers use, per key

	ctx, cancel := context.WithTimeout(context.Background(), wl.limit)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	sleep := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			return false
		}
	}
	count := func(status int) {
		switch status {
		case http.StatusOK:
			st.ok.Add(1)
		case http.StatusConflict:
			st.stale.Add(1)
		case http.StatusTooManyRequests:
			st.draining.Add(1)
		case http.StatusServiceUnavailable:
			st.unavailable.Add(1)
		default:
			st.other.Add(1)
		}
	}

	// Two holders compete for each key.
	for h := range 2 * wl.keys {
		k := h % wl.keys
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(h), 7))
			key := wl.lockKey(k)
			for ctx.Err() == nil {
				r, err := lockAPIs[rng.IntN(len(lockAPIs))].Acquire(ctx, key, barrierTTL)
				if err != nil || !r.OK {
					sleep(time.Duration(10+rng.IntN(30)) * time.Millisecond)
					continue
				}
				st.issued.Add(1)
				fence := r.Fence
				current[k].Store(&fence)
				if rng.IntN(8) == 0 {
					// Stall like a paused process (no release, no
					// extend), then still write: the edge must refuse.
					if !sleep(barrierStall) {
						return
					}
					st.stalledWrites.Add(1)
					status := send(hc, wl.proxies[rng.IntN(len(wl.proxies))], key, fence, nil)
					if status == http.StatusOK {
						st.stalledAdmitted.Add(1)
					}
					continue
				}
				sleep(barrierHoldMin + rand.N(barrierHoldSpan))
				// Hand over: release while writes under this fence are
				// still in flight.
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, _ = lockAPIs[rng.IntN(len(lockAPIs))].Release(rctx, r.LockID)
				rcancel()
			}
		}()
	}
	for w := range wl.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for ctx.Err() == nil {
				k := rng.IntN(wl.keys)
				f := current[k].Load()
				if f == nil {
					sleep(10 * time.Millisecond)
					continue
				}
				// A write once sent is seen through: retried while the
				// proxy answers 429 draining, until admitted or stale.
				for try := 0; try < 100; try++ {
					status := send(hc, wl.proxies[rng.IntN(len(wl.proxies))], wl.lockKey(k), *f, nil)
					count(status)
					if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
						time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
						continue
					}
					if status != http.StatusOK {
						time.Sleep(time.Duration(2+rng.IntN(5)) * time.Millisecond)
					}
					break
				}
			}
		}()
	}
	// Stop at the target, once a stalled holder has also written (a stall
	// lasts longer than a fast machine takes to reach a small target, and
	// the stalled writes are what the edge must refuse); the limit still
	// bounds the run.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sleep(100 * time.Millisecond) {
			if wl.up.committed() >= wl.target && st.stalledWrites.Load() > 0 {
				cancel()
			}
		}
	}()
	wg.Wait()
	st.elapsed = time.Since(start)
	return st
}

// proxyRoutesConfig writes a config whose proxy routes are given as YAML
// list items. The check's budget (300 ms) is also how long a barrier write
// waits for older ones before it is refused 429 (route: maxWait 300ms):
// longer than the default check budget, so that a loaded machine's slow
// store read is rarely a (correct, retried) 503, shorter than the
// upstream's longest hold, so that writers see 429s and retry.
func proxyRoutesConfig(t *testing.T, routes ...string) string {
	t.Helper()
	var b strings.Builder
	// Every writer and holder of these tests is one client IP, with up to
	// 72 connections open: past the default 64 per peer the proxy would
	// shed some (docs/api.md "Connection limits").
	b.WriteString("connections:\n  maxPerPeer: 256\ncheck:\n  timeout: 300ms\nproxy:\n  addr: 127.0.0.1:0\n  routes:\n")
	for _, r := range routes {
		b.WriteString(r)
	}
	p := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func route(name, upstream string, barrier bool, maxWrite string) string {
	s := fmt.Sprintf("    - name: %s\n      prefix: /%s\n      upstream: %s\n", name, name, upstream)
	if barrier {
		// maxWait as long as the check's budget (proxyRoutesConfig), the
		// wait these tests were written for: writers see 429s while older
		// writes are in flight (the proxy's default would wait 5 s).
		s += "      barrier: true\n      maxWait: 300ms\n"
		if maxWrite != "" {
			s += "      maxWrite: " + maxWrite + "\n"
		}
	}
	return s
}

// metricValue reads one unlabelled sample from a /metrics endpoint.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	r := Do(t, base, Call{Method: http.MethodGet, Path: "/metrics"})
	if r.Status != http.StatusOK {
		t.Fatalf("GET /metrics = %d", r.Status)
	}
	for _, line := range strings.Split(string(r.Body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// TestBarrierThroughProxy is the proof: 64 writers, 4 keys, a recording
// upstream that holds every write 0–300 ms, the real `fencegate proxy` on
// Redis, locks from the real gateway's lock API. The barrier-off route runs
// the same workload, shorter, and must show violations.
func TestBarrierThroughProxy(t *testing.T) {
	upOn := &holdingUpstream{hold: randomHold(300 * time.Millisecond)}
	upOff := &holdingUpstream{hold: randomHold(300 * time.Millisecond)}
	appOn, appOff := httptest.NewServer(upOn), httptest.NewServer(upOff)
	defer appOn.Close()
	defer appOff.Close()

	storeURL := RedisURL(t, "e2e_barrier_"+randHex(4))
	g := StartGateway(t, storeURL, "--log-level", "info")
	p := StartProxy(t, storeURL, proxyRoutesConfig(t,
		route("on", appOn.URL, true, "10s"),
		route("off", appOff.URL, false, "")), "--log-level", "info", "--metrics-addr", "127.0.0.1:0")
	proxyURL := "http://" + p.Proxy

	wl := workload{gateways: []string{g.URL()}, proxies: []string{proxyURL}, keys: 4, writers: 64}

	off := wl
	off.prefix, off.target, off.limit, off.up = "/off", 2000, 90*time.Second, upOff
	offStats := off.run(t)
	offV := analyse(upOff.settle(t))
	t.Logf("barrier off (%s): %s; %s", offStats.elapsed.Round(time.Millisecond), offV, offStats)

	on := wl
	on.prefix, on.target, on.limit, on.up = "/on", 20000, 6*time.Minute, upOn
	onStats := on.run(t)
	onV := analyse(upOn.settle(t))
	t.Logf("barrier on (%s): %s; %s", onStats.elapsed.Round(time.Millisecond), onV, onStats)

	fmt.Printf("barrier proof through fencegate proxy: barrier on: %d writes, %d overlapping, %d out of order; barrier off: %d writes, %d overlapping, %d out of order (worst overlap %s)\n",
		onV.writes, onV.overlaps, onV.inversions, offV.writes, offV.overlaps, offV.inversions, offV.worst.Round(time.Millisecond))

	if onV.writes < 20000 {
		t.Errorf("barrier on: only %d writes reached the upstream in %s, want at least 20000", onV.writes, on.limit)
	}
	if onV.overlaps != 0 || onV.inversions != 0 {
		t.Errorf("barrier on: %s; want 0 and 0", onV)
	}
	if offV.overlaps == 0 || offV.inversions == 0 {
		t.Errorf("barrier off: %s; the same workload without the barrier must show both kinds of violation, or the proof proves nothing", offV)
	}
	for name, s := range map[string]*workloadStats{"on": onStats, "off": offStats} {
		if n := s.stalledAdmitted.Load(); n > 0 {
			t.Errorf("barrier %s: %d writes of holders stalled past their TTL were admitted", name, n)
		}
		if n := s.other.Load(); n > 0 {
			t.Errorf("barrier %s: %d writes answered neither 200, 409, 429 nor 503", name, n)
		}
		if s.stalledWrites.Load() == 0 || s.issued.Load() < 20 {
			t.Errorf("barrier %s: workload too small: %s", name, s)
		}
	}
	// The barrier held writes back (waited, or refused 429): the
	// handovers did meet writes in flight.
	if waits := metricValue(t, "http://"+p.Metrics, "fencegate_barrier_wait_seconds_count"); waits == 0 {
		t.Errorf("barrier on: no write ever waited for an older one (fencegate_barrier_wait_seconds_count 0); the handovers never met a write in flight")
	} else {
		t.Logf("barrier on: %v writes waited for older fences' writes to finish", waits)
	}
	if offStats.draining.Load() != 0 {
		t.Errorf("barrier off: %d writes refused 429 draining", offStats.draining.Load())
	}
}
