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
