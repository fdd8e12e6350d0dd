package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// TestProxyBarrierMaxWait: dur(the route's maxWait is the barrier's wait (a
// write behind one in flight is refused 429 draining just after it), with a
// Retry-After from the time it waited), and by default a write waits for
// the older one and is admitted once it finishes.
func TestProxyBarrierMaxWait(t *testing.T) {
	t.Run("refused at the route's maxWait", func(t *testing.T) {
		s := locktest.OpenBolt(t, locktest.FloorOff)
		h := newHeldUpstream(t)
		c := fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond})
		const maxWait = 300 * time.Millisecond
		url, w1, l2 := behindHeldWrite(t, s, c, h, config.Route{Barrier: true, MaxWrite: dur(time.Minute), MaxWait: dur(maxWait)})
		start := time.Now()
		res, body, err := post(t.Context(), t, url+"/w", l2.Fence, false)
		took := time.Since(start)
		if err != nil || res.StatusCode != 429 || res.Header.Get("X-Fence-Reason") != "draining" {
			t.Fatalf("W2: %v %q %v, want 429 draining", res, body, err)
		}
		if took < maxWait || took > maxWait+2*time.Second {
			t.Errorf("W2 refused after %v, want just after the route's maxWait %v", took, maxWait)
		}
		if ra := res.Header.Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After %q, want 1 (waited 300 ms; W1's deadline is a minute away)", ra)
		}
		h.unblock()
		<-w1
	})
	t.Run("default: waits, admitted after W1", func(t *testing.T) {
		s := locktest.OpenBolt(t, locktest.FloorOff)
		h := newHeldUpstream(t)
		c := fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond})
		url, w1, l2 := behindHeldWrite(t, s, c, h, config.Route{Barrier: true})
		w2 := sendWrite(t, url+"/w", l2.Fence, false)
		time.Sleep(500 * time.Millisecond) // five times the old budget (check.timeout here: 50 ms)
		select {
		case st := <-w2:
			t.Fatalf("W2 answered %d while W1 was in flight", st)
		default:
		}
		admittedAfterW1(t, h, w1, w2)
	})
}

// TestProxyBarrierMaxWriteFromAdmission: a write that waited at the barrier
// keeps its whole maxWrite for the exchange, counted from its admission.
// W1 holds the key for 700 ms; W2 arrives at once, is admitted when W1
// finishes, and its upstream takes 600 ms: 1.3 s after its arrival, within
// maxWrite (1 s) from its admission. Timed from the arrival (the broken
// variant, as before the wait could be long), W2's exchange is cut (504).
func TestProxyBarrierMaxWriteFromAdmission(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fromArrival bool
		want        int
	}{
		{"correct", false, 200},
		{"broken: maxWrite from arrival", true, 504},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := locktest.OpenBolt(t, locktest.FloorOff)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if d, err := time.ParseDuration(r.Header.Get("X-Sleep")); err == nil {
					select {
					case <-time.After(d):
					case <-r.Context().Done():
						return
					}
				}
				_, _ = io.WriteString(w, "ok")
			}))
			t.Cleanup(up.Close)
			c := fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond})
			_, srv := serveProxy(t, c, []config.Route{{Match: prefix("/"), Upstream: up.URL, Key: "acct", Barrier: true, MaxWrite: dur(time.Second), MaxWait: dur(3 * time.Second)}},
				Options{maxWriteFromArrival: tc.fromArrival})
			send := func(fence, sleep string) chan int {
				ch := make(chan int, 1)
				go func() {
					req, _ := http.NewRequest("POST", srv.URL+"/w", strings.NewReader("x"))
					req.Header.Set("X-Fence-Token", fence)
					req.Header.Set("X-Sleep", sleep)
					res, err := http.DefaultClient.Do(req)
					if err != nil {
						ch <- -1
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					ch <- res.StatusCode
				}()
				return ch
			}
			l1 := locktest.Acquire(t, s, "acct", time.Minute)
			w1 := send(l1.Fence, "700ms")
			time.Sleep(100 * time.Millisecond) // W1 admitted
			l2 := locktest.HandOver(t, s, l1, "acct", time.Minute)
			w2 := send(l2.Fence, "600ms")
			if st := <-w1; st != 200 {
				t.Fatalf("W1 %d", st)
			}
			if st := <-w2; st != tc.want {
				t.Fatalf("W2 %d, want %d", st, tc.want)
			}
		})
	}
}
