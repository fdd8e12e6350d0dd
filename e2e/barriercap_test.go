package e2e

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBarrierAbandonedWritesBounded replays issue #19's report through the
// real `fencegate proxy` on Redis: a client that knows a key's current
// fence sends thousands of writes whose upstream exchange fails (each is
// abandoned: its entry stays until maxWrite), while an honest client writes
// to an unrelated key. The abusive key stops at its cap of writes in flight
// (429 too-many-writes, counted in fencegate_barrier_full_total), and every
// honest write is admitted, none fails closed, none waits long.
func TestBarrierAbandonedWritesBounded(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "abuse") {
			panic(http.ErrAbortHandler) // the exchange fails: the proxy abandons the write
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer app.Close()
	storeURL := RedisURL(t, "e2e_barriercap_"+randHex(4))
	g := StartGateway(t, storeURL, "--log-level", "info")
	p := StartProxy(t, storeURL, proxyRoutesConfig(t, route("b", app.URL, true, "60s")),
		"--log-level", "info", "--metrics-addr", "127.0.0.1:0")
	proxyURL := "http://" + p.Proxy
	abuse := acquireHTTP(t, g.URL(), "b/abuse", 120000)
	honest := acquireHTTP(t, g.URL(), "b/honest", 120000)

	const abusers, perAbuser = 24, 125 // 3,000 abandoned writes
	var (
		wg            sync.WaitGroup
		abandoned     atomic.Int64
		full          atomic.Int64
		otherAbuse    atomic.Int64
		stop          = make(chan struct{})
		mu            sync.Mutex
		honestLatency []time.Duration
		honestStatus  = map[int]int{}
	)
	hc := newWriteClient(abusers + 4)
	for range abusers {
		wg.Go(func() {
			for range perAbuser {
				switch send(hc, proxyURL, "b/abuse", abuse.Fence, nil) {
				case http.StatusBadGateway:
					abandoned.Add(1)
				case http.StatusTooManyRequests:
					full.Add(1)
				default:
					otherAbuse.Add(1)
				}
			}
		})
	}
	var hw sync.WaitGroup
	hw.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			st := send(hc, proxyURL, "b/honest", honest.Fence, nil)
			mu.Lock()
			honestLatency = append(honestLatency, time.Since(t0))
			honestStatus[st]++
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	})
	wg.Wait()
	close(stop)
	hw.Wait()

	slices.Sort(honestLatency)
	worst := honestLatency[len(honestLatency)-1]
	t.Logf("abusive key: %d abandoned (admitted), %d refused 429, %d other; honest key: %v over %d writes, worst %s, median %s",
		abandoned.Load(), full.Load(), otherAbuse.Load(), honestStatus, len(honestLatency), worst, honestLatency[len(honestLatency)/2])
	if n := abandoned.Load(); n > 1024 {
		t.Errorf("%d writes were admitted on the abusive key and abandoned, want at most the cap 1024", n)
	}
	if full.Load() == 0 || otherAbuse.Load() != 0 {
		t.Errorf("abusive key: %d refused 429, %d other answers; want the writes past the cap refused 429 and nothing else", full.Load(), otherAbuse.Load())
	}
	if got := metricValue(t, "http://"+p.Metrics, "fencegate_barrier_full_total"); got != float64(full.Load()) {
		t.Errorf("fencegate_barrier_full_total = %v, want the %d refusals", got, full.Load())
	}
	if len(honestStatus) != 1 || honestStatus[http.StatusOK] == 0 {
		t.Errorf("honest key answers %v, want only 200", honestStatus)
	}
	// Generous: the check's own budget is 300 ms plus one more for a wait.
	if worst > 2*time.Second {
		t.Errorf("an honest write to an unrelated key took %s", worst)
	}
}
