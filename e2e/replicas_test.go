package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/internal/testutil"
)

// gatedHold holds a write that carries X-Hold until release is closed
// (bounded, so that a failed test never hangs its upstream); other writes
// commit at once.
type gatedHold struct {
	once    sync.Once
	release chan struct{}
}

func newGatedHold() *gatedHold { return &gatedHold{release: make(chan struct{})} }

func (g *gatedHold) hold(r *http.Request) {
	if r.Header.Get("X-Hold") == "" {
		return
	}
	select {
	case <-g.release:
	case <-time.After(2 * time.Minute):
	}
}

func (g *gatedHold) open() { g.once.Do(func() { close(g.release) }) }

// replicaTry is one write of the new holder.
type replicaTry struct {
	sent, answered time.Time
	status         int
	reason         string
	retryAfter     string
}

func tryWrite(t *testing.T, hc *http.Client, proxy, lockKey, fence string) replicaTry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, proxy+"/"+lockKey, http.NoBody)
	req.Header.Set(client.HeaderKey, lockKey)
	req.Header.Set(client.HeaderToken, fence)
	tr := replicaTry{sent: time.Now()}
	resp, err := hc.Do(req)
	tr.answered = time.Now()
	if err != nil {
		t.Fatalf("write through %s: %v", proxy, err)
	}
	resp.Body.Close()
	tr.status, tr.reason, tr.retryAfter = resp.StatusCode, resp.Header.Get("X-Fence-Reason"), resp.Header.Get("Retry-After")
	return tr
}

// checkRefused asserts a write was not admitted: 429 draining with a
// Retry-After (the barrier's answer), or 503 unavailable (a store call
// that outlasted the check's budget on a loaded machine: fails closed, and
// proves nothing either way). It reports whether it was 429 draining.
func checkRefused(t *testing.T, tr replicaTry, what string) bool {
	t.Helper()
	switch {
	case tr.status == http.StatusServiceUnavailable:
		t.Logf("%s: 503 %q (the check's budget ran out), retried", what, tr.reason)
		return false
	case tr.status != http.StatusTooManyRequests || tr.reason != "draining":
		t.Fatalf("%s: %d (x-fence-reason %q), want 429 draining", what, tr.status, tr.reason)
	}
	if s, err := strconv.Atoi(tr.retryAfter); err != nil || s < 1 {
		t.Errorf("%s: Retry-After %q, want whole seconds ≥ 1", what, tr.retryAfter)
	}
	return true
}

// TestReplicasBarrier runs three gateway processes (`fencegate serve` with
// proxy routes) on one Redis, and on one PostgreSQL: the barrier's state is
// in the store, so a write admitted by one replica holds back a newer
// fence's write at another, and a replica killed with kill -9 leaves its
// writes to expire at maxWrite — not before.
func TestReplicasBarrier(t *testing.T) {
	for _, st := range []Store{
		{"redis", RedisURL(t, "e2e_replicas_"+randHex(4))},
		{"postgres", PostgresURL(t, "e2e_replicas_"+randHex(4))},
	} {
		t.Run(st.Name, func(t *testing.T) { testReplicas(t, st.URL) })
	}
}

// killMaxWrite is the kill -9 route's maxWrite: short, so the test waits
// little, long enough that a loaded machine still decides a write before it.
const killMaxWrite = 3 * time.Second

func testReplicas(t *testing.T, storeURL string) {
	detGate, offGate, killGate := newGatedHold(), newGatedHold(), newGatedHold()
	defer detGate.open()
	defer offGate.open()
	defer killGate.open()
	upDet := &holdingUpstream{hold: detGate.hold}
	upOff := &holdingUpstream{hold: offGate.hold}
	upRand := &holdingUpstream{hold: randomHold(300 * time.Millisecond)}
	upKill := &holdingUpstream{hold: killGate.hold}
	url := map[*holdingUpstream]string{}
	for _, u := range []*holdingUpstream{upDet, upOff, upRand, upKill} {
		s := httptest.NewServer(u)
		defer s.Close()
		url[u] = s.URL
	}
	cfg := proxyRoutesConfig(t,
		route("det", url[upDet], true, "30s"),
		route("detoff", url[upOff], false, ""),
		route("rand", url[upRand], true, "10s"),
		route("kill", url[upKill], true, killMaxWrite.String()))
	var gws []*Gateway
	for range 3 {
		gws = append(gws, StartGateway(t, storeURL, "--log-level", "info", "--config", cfg))
	}
	proxyURL := func(i int) string { return "http://" + gws[i].Proxy }
	lockAPI := func(i int) *client.Client {
		c, err := client.New(gws[i].URL())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	hc := newWriteClient(16)
	ctx := context.Background()

	// The old holder's write, admitted by replica 0, is held at the
	// upstream while the lock changes hands; the new holder's writes
	// through replicas 1 and 2 are refused 429 draining until it
	// completes, then admitted.
	t.Run("handover", func(t *testing.T) {
		key := "det/k"
		old, err := lockAPI(0).Acquire(ctx, key, 30*time.Second)
		if err != nil || !old.OK {
			t.Fatalf("acquire: %+v %v", old, err)
		}
		oldDone := make(chan int, 1)
		go func() { oldDone <- send(hc, proxyURL(0), key, old.Fence, http.Header{"X-Hold": {"1"}}) }()
		testutil.WaitFor(t, 30*time.Second, "the old holder's write to reach the upstream", func() bool { return upDet.arrived(key) == 1 })

		if r, err := lockAPI(1).Release(ctx, old.LockID); err != nil || !r.OK {
			t.Fatalf("release: %+v %v", r, err)
		}
		next, err := lockAPI(1).Acquire(ctx, key, 30*time.Second)
		if err != nil || !next.OK || next.Fence <= old.Fence {
			t.Fatalf("acquire after release: %+v %v (old fence %s)", next, err, old.Fence)
		}
		draining := 0
		for i := range 4 {
			if checkRefused(t, tryWrite(t, hc, proxyURL(1+i%2), key, next.Fence), "the new holder's write while the old one is in flight") {
				draining++
			}
		}
		if draining == 0 {
			t.Fatalf("no write of the new holder was refused 429 draining while the old one was in flight")
		}
		if n := upDet.arrived(key); n != 1 {
			t.Fatalf("%d writes reached the upstream while the old one was held, want 1", n)
		}

		detGate.open()
		opened := time.Now()
		if s := <-oldDone; s != http.StatusOK {
			t.Fatalf("the old holder's write answered %d, want 200", s)
		}
		var admitted replicaTry
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; ; i++ {
			tr := tryWrite(t, hc, proxyURL(1+i%2), key, next.Fence)
			if tr.status == http.StatusOK {
				admitted = tr
				break
			}
			checkRefused(t, tr, "the new holder's write after the old one completed")
			if time.Now().After(deadline) {
				t.Fatalf("the new holder's write still refused 20s after the old write completed")
			}
			time.Sleep(20 * time.Millisecond)
		}
		v := analyse(upDet.settle(t))
		if v.writes != 2 || v.overlaps != 0 || v.inversions != 0 {
			t.Errorf("upstream: %s; want 2 writes, 0 and 0", v)
		}
		t.Logf("new holder admitted %s after the upstream let the old write commit; %s", admitted.answered.Sub(opened).Round(time.Millisecond), v)
	})

	// The same handover on a route without the barrier: the new holder's
	// write is admitted while the old one is still held, and the
	// upstream's record shows both kinds of violation (the detector the
	// other cases rely on can fail).
	t.Run("handover-without-barrier", func(t *testing.T) {
		key := "detoff/k"
		old, err := lockAPI(0).Acquire(ctx, key, 30*time.Second)
		if err != nil || !old.OK {
			t.Fatalf("acquire: %+v %v", old, err)
		}
		oldDone := make(chan int, 1)
		go func() { oldDone <- send(hc, proxyURL(0), key, old.Fence, http.Header{"X-Hold": {"1"}}) }()
		testutil.WaitFor(t, 30*time.Second, "the old holder's write to reach the upstream", func() bool { return upOff.arrived(key) == 1 })
		if r, err := lockAPI(1).Release(ctx, old.LockID); err != nil || !r.OK {
			t.Fatalf("release: %+v %v", r, err)
		}
		next, err := lockAPI(1).Acquire(ctx, key, 30*time.Second)
		if err != nil || !next.OK {
			t.Fatalf("acquire after release: %+v %v", next, err)
		}
		if tr := tryWrite(t, hc, proxyURL(1), key, next.Fence); tr.status != http.StatusOK {
			t.Fatalf("without the barrier the new holder's write answered %d, want 200", tr.status)
		}
		offGate.open()
		<-oldDone
		v := analyse(upOff.settle(t))
		if v.overlaps == 0 || v.inversions == 0 {
			t.Errorf("without the barrier: %s; want both kinds of violation", v)
		}
		t.Logf("without the barrier: %s", v)
	})

	// The workload of the proof, shorter, with every acquire, release and
	// write going to a random replica.
	t.Run("randomized", func(t *testing.T) {
		wl := workload{
			gateways: []string{gws[0].URL(), gws[1].URL(), gws[2].URL()},
			proxies:  []string{proxyURL(0), proxyURL(1), proxyURL(2)},
			prefix:   "/rand", keys: 4, writers: 32, target: 3000, limit: 3 * time.Minute, up: upRand,
		}
		waits := func() float64 {
			var n float64
			for _, g := range gws {
				n += metricValue(t, g.URL(), "fencegate_barrier_wait_seconds_count")
			}
			return n
		}
		waitsBefore := waits()
		st := wl.run(t)
		v := analyse(upRand.settle(t))
		t.Logf("three replicas (%s): %s; %s", st.elapsed.Round(time.Millisecond), v, st)
		if v.writes < 3000 || v.overlaps != 0 || v.inversions != 0 {
			t.Errorf("three replicas: %s; want at least 3000 writes, 0 and 0", v)
		}
		if st.stalledAdmitted.Load() != 0 || st.other.Load() != 0 {
			t.Errorf("three replicas: %s", st)
		}
		if waited := waits() - waitsBefore; waited == 0 {
			t.Errorf("three replicas: no write waited for an older fence's writes (fencegate_barrier_wait_seconds_count); the handovers never met a write in flight")
		} else {
			t.Logf("three replicas: %v writes waited for older fences' writes to finish", waited)
		}
	})

	// Replica 0 is killed with kill -9 while its writes are held at the
	// upstream: nobody will ever finish them. The new holder's writes, at
	// replicas 1 and 2, are refused until maxWrite has passed since their
	// admission, then admitted.
	t.Run("kill9", func(t *testing.T) {
		key := "kill/k"
		old, err := lockAPI(0).Acquire(ctx, key, 30*time.Second)
		if err != nil || !old.OK {
			t.Fatalf("acquire: %+v %v", old, err)
		}
		const inflight = 3
		var sentLast time.Time
		var wg sync.WaitGroup
		for i := range inflight {
			sentLast = time.Now()
			wg.Add(1)
			go func() { defer wg.Done(); send(hc, proxyURL(0), key, old.Fence, http.Header{"X-Hold": {"1"}}) }()
			testutil.WaitFor(t, 30*time.Second, "the old holder's write to reach the upstream", func() bool { return upKill.arrived(key) == i+1 })
		}
		admittedBy := time.Now() // every old write was admitted before this
		gws[0].Kill(t)
		// The upstream commits the old writes now; the dead proxy will
		// never see their responses, so nothing finishes their entries.
		killGate.open()
		wg.Wait()
		upKill.settle(t)

		if r, err := lockAPI(1).Release(ctx, old.LockID); err != nil || !r.OK {
			t.Fatalf("release: %+v %v", r, err)
		}
		next, err := lockAPI(2).Acquire(ctx, key, 30*time.Second)
		if err != nil || !next.OK || next.Fence <= old.Fence {
			t.Fatalf("acquire after release: %+v %v (old fence %s)", next, err, old.Fence)
		}

		// Each entry's deadline is its admission + maxWrite, and the last
		// write was admitted after it was sent: a write decided before
		// sentLast + maxWrite must be refused. All were admitted before
		// admittedBy: after admittedBy + maxWrite nothing blocks.
		notBefore := sentLast.Add(killMaxWrite - 10*time.Millisecond)
		allExpired := admittedBy.Add(killMaxWrite)
		var tries []replicaTry
		for i := 0; ; i++ {
			tr := tryWrite(t, hc, proxyURL(1+i%2), key, next.Fence)
			tries = append(tries, tr)
			if tr.status == http.StatusOK {
				break
			}
			checkRefused(t, tr, "the new holder's write while the dead replica's writes are unexpired")
			if time.Since(allExpired) > 20*time.Second {
				t.Fatalf("the new holder's writes still refused 20s after every dead replica's write passed maxWrite (%d tries)", len(tries))
			}
			time.Sleep(50 * time.Millisecond)
		}
		refusedEarly, admitted := 0, tries[len(tries)-1]
		for _, tr := range tries {
			if tr.answered.Before(notBefore) {
				if tr.status == http.StatusOK {
					t.Errorf("a write answered %s before maxWrite had passed since the last dead write was sent was admitted", notBefore.Sub(tr.answered))
				}
				if tr.status == http.StatusTooManyRequests {
					refusedEarly++
				}
			}
		}
		if refusedEarly == 0 {
			t.Fatalf("no write was decided before maxWrite had passed (the first was answered %s after the last dead write was sent): the machine was too slow to prove \"not before\"; raise killMaxWrite",
				tries[0].answered.Sub(sentLast).Round(time.Millisecond))
		}
		if admitted.sent.After(allExpired.Add(15 * time.Second)) {
			t.Errorf("admitted only %s after maxWrite had passed", admitted.sent.Sub(allExpired))
		}
		v := analyse(upKill.settle(t))
		if v.overlaps != 0 || v.inversions != 0 {
			t.Errorf("upstream: %s; want 0 and 0", v)
		}
		t.Logf("kill -9 with %d writes in flight: %d writes refused 429 draining before maxWrite (%s) had passed; admitted %s after the last dead write was sent (maxWrite %s); %s",
			inflight, refusedEarly, killMaxWrite, admitted.answered.Sub(sentLast).Round(time.Millisecond), killMaxWrite, v)
	})
}
