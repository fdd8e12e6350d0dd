package serving

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/health"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// okRunner binds an HTTP listener answering 200 on every path.
func okRunner(t *testing.T) *HTTPRunner {
	t.Helper()
	r, err := NewHTTP("http", "127.0.0.1:0", nil, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), time.Minute, connlimit.Limits{}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// served says whether a GET on addr is answered 200.
func served(addr string) bool {
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Get("http://" + addr + "/")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// TestGroupLifecycle: Run makes the process ready once its listeners
// serve; when ctx ends every listener reports unready at once (draining)
// and keeps serving for Delay, then drains and the process stops; the
// listener is closed after.
func TestGroupLifecycle(t *testing.T) {
	hs, err := health.New(health.Options{Store: locktest.OpenBolt(t), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	r := okRunner(t)
	g := &Group{Health: hs, Delay: time.Second}
	g.Add("http", r)
	addr := r.Addr()
	if hs.Phase() != health.Starting {
		t.Fatalf("phase %v before Run", hs.Phase())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, discardLogger()) }()
	testutil.WaitFor(t, 10*time.Second, "ready", func() bool { return hs.Phase() == health.Ready })
	if !served(addr) {
		t.Fatal("not served once ready")
	}
	cancel()
	testutil.WaitFor(t, 10*time.Second, "draining", func() bool { return hs.Phase() == health.Draining })
	if !served(addr) {
		t.Fatal("draining: the listener stopped serving before shutdown.delay was over")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the delay and drain")
	}
	if hs.Phase() != health.Stopped {
		t.Fatalf("phase %v after Run", hs.Phase())
	}
	if served(addr) {
		t.Fatal("still served after Run returned")
	}
}

// TestGroupCloseUnserved: listeners bound for a Group never run are
// closed by CloseUnserved (their addresses can be bound again at once; not
// before it); once Run has started, CloseUnserved leaves them to Run's
// shutdown.
func TestGroupCloseUnserved(t *testing.T) {
	g := &Group{}
	a, b := okRunner(t), okRunner(t)
	g.Add("a", a)
	g.Add("b", b)
	// The probe can tell: before CloseUnserved (what a plain return on a
	// build error did) the address is still bound.
	if ln, err := net.Listen("tcp", a.Addr()); err == nil {
		ln.Close()
		t.Fatal("a bound listener's address could be bound again: the probe proves nothing")
	}
	g.CloseUnserved()
	for _, addr := range []string{a.Addr(), b.Addr()} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s still bound after CloseUnserved: %v", addr, err)
		}
		ln.Close()
	}

	r := okRunner(t)
	g = &Group{}
	g.Add("http", r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, discardLogger()) }()
	testutil.WaitFor(t, 10*time.Second, "served", func() bool { return served(r.Addr()) })
	g.CloseUnserved()
	if !served(r.Addr()) {
		t.Fatal("CloseUnserved closed a listener Run serves")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestGroupDrainAtLeast: a request in flight when the shutdown begins is
// let finish for as long as DrainAtLeast asks at that moment (a fencing
// proxy's barrier entries as last reloaded), beyond the Drain fixed at
// start. The broken variant (Drain alone, as before) cuts it.
func TestGroupDrainAtLeast(t *testing.T) {
	for _, tc := range []struct {
		name    string
		atLeast func() time.Duration
		want    bool // the slow request is answered
	}{
		{"at least the reloaded drain", func() time.Duration { return 10 * time.Second }, true},
		{"broken: the start's drain alone", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{})
			slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(started)
				time.Sleep(1500 * time.Millisecond)
			})
			r, err := NewHTTP("http", "127.0.0.1:0", nil, slow, time.Minute, connlimit.Limits{}, discardLogger())
			if err != nil {
				t.Fatal(err)
			}
			g := &Group{Drain: 200 * time.Millisecond, DrainAtLeast: tc.atLeast}
			g.Add("http", r)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- g.Run(ctx, discardLogger()) }()
			answered := make(chan bool, 1)
			go func() {
				c := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
				res, err := c.Get("http://" + r.Addr() + "/")
				if err == nil {
					res.Body.Close()
				}
				answered <- err == nil && res.StatusCode == http.StatusOK
			}()
			<-started
			cancel()
			if got := <-answered; got != tc.want {
				t.Fatalf("the request in flight answered: %v, want %v", got, tc.want)
			}
			<-done
		})
	}
}
