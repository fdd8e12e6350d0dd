package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/routes"
)

// seen is what the upstream received.
type seen struct {
	method string
	path   string
	header http.Header
	body   string
}

// recorder is an upstream that records every request and answers 200
// "upstream ok".
func recorder(t *testing.T) (*httptest.Server, chan seen) {
	t.Helper()
	ch := make(chan seen, 64)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- seen{method: r.Method, path: r.URL.RequestURI(), header: r.Header.Clone(), body: string(b)}
		w.Header().Set("X-Upstream", "1")
		_, _ = io.WriteString(w, "upstream ok")
	}))
	t.Cleanup(up.Close)
	return up, ch
}

// prefix is a table entry's match of the path prefix p.
func prefix(p string) config.RouteMatch {
	return config.RouteMatch{Path: config.RoutePath{Type: config.RoutePathPrefix, Value: p}}
}

// dur is d as the configuration spells a duration.
func dur(d time.Duration) config.Duration { return config.Duration(d) }

// table compiles entries (an entry without a name is named by its
// position) into a route table, as cmd compiles the configuration's.
func table(t testing.TB, entries []config.Route) *routes.Table {
	t.Helper()
	entries = slices.Clone(entries)
	for i := range entries {
		if entries[i].Name == "" {
			entries[i].Name = fmt.Sprintf("r%d", i)
		}
	}
	tbl, err := routes.Compile(entries, routes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// serveProxy runs the proxy on a real listener, serving entries.
func serveProxy(t *testing.T, c *fencecheck.Checker, entries []config.Route, o Options) (*Proxy, *httptest.Server) {
	t.Helper()
	p, srv, _ := serveHolder(t, c, entries, o)
	return p, srv
}

// serveHolder is serveProxy with the holder the proxy reads its table
// from, for a test to swap (a reload).
func serveHolder(t *testing.T, c *fencecheck.Checker, entries []config.Route, o Options) (*Proxy, *httptest.Server, *routes.Holder) {
	t.Helper()
	h := routes.NewHolder(table(t, entries))
	p, err := New(c, h, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv, h
}

func do(t *testing.T, method, url string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

type denial struct {
	Error      string `json:"error"`
	Key        string `json:"key"`
	Presented  string `json:"presented"`
	Current    string `json:"current"`
	DecisionID string `json:"decisionId"`
}

// TestProxyDecisions runs every decision through the proxy, a real bolt
// store and a real upstream: allowed writes reach the upstream with
// x-fence-verified and without x-fence-lock-id; denials never reach it and
// carry the status, headers and body of the other edges.
func TestProxyDecisions(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	k := locktest.NewDecisionKeys(t, s)
	old, cur, gone, tpl := k.Old, k.Cur, k.Gone, k.Tpl
	otherID, _ := lockstore.NewLockID()

	up, got := recorder(t)
	u := up.URL + "/base"
	entries := []config.Route{
		{Name: "orders", Match: prefix("/orders"), Upstream: u},
		{Name: "tpl", Match: prefix("/tpl"), Upstream: u, Key: "orders/{2}", Barrier: true},
		{Name: "latest", Match: prefix("/latest"), Upstream: u, Policy: string(fencecheck.PolicyLatest)},
		{Name: "dry", Match: prefix("/dry"), Upstream: u, Mode: string(fencecheck.ModeDryRun)},
		{Name: "off", Match: prefix("/off"), Upstream: u, Policy: string(fencecheck.PolicyOff)},
		{Name: "custom", Match: prefix("/custom"), Upstream: u, KeyHeader: "X-Resource", FenceHeader: "If-Fence", Methods: "POST"},
	}
	_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), entries, Options{})

	H := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	k1 := func(fence string, more ...string) map[string]string {
		return H(append([]string{"X-Fence-Key", "orders/1", "X-Fence-Token", fence}, more...)...)
	}
	tests := []struct {
		name     string
		method   string
		path     string
		header   map[string]string
		status   int
		reason   string
		current  string
		verified string
		wouldDen string
	}{
		{name: "read", method: "GET", path: "/orders/1", status: 200},
		{name: "current", method: "POST", path: "/orders/1", header: k1(cur.Fence), status: 200, verified: cur.Fence},
		{name: "lockId match", method: "PUT", path: "/orders/1", header: k1(cur.Fence, "X-Fence-Lock-Id", cur.LockID), status: 200, verified: cur.Fence},
		{name: "missing", method: "POST", path: "/orders/1", header: H("X-Fence-Key", "orders/1"), status: 428, reason: "missing"},
		{name: "malformed", method: "POST", path: "/orders/1", header: k1("12"), status: 400, reason: "malformed"},
		{name: "stale", method: "DELETE", path: "/orders/1", header: k1(old.Fence), status: 409, reason: "stale", current: cur.Fence},
		{name: "unknown", method: "PATCH", path: "/orders/1", header: k1("000000000000099"), status: 409, reason: "unknown", current: cur.Fence},
		{name: "not held", method: "POST", path: "/orders/2", header: H("X-Fence-Key", "orders/2", "X-Fence-Token", gone.Fence), status: 409, reason: "not-held", current: gone.Fence},
		{name: "wrong owner", method: "POST", path: "/orders/1", header: k1(cur.Fence, "X-Fence-Lock-Id", otherID), status: 409, reason: "wrong-owner", current: cur.Fence},
		{name: "latest after release", method: "POST", path: "/latest/2", header: H("X-Fence-Key", "orders/2", "X-Fence-Token", gone.Fence), status: 200, verified: gone.Fence},
		{name: "template barrier", method: "PUT", path: "/tpl/42?x=1", header: H("X-Fence-Token", tpl.Fence), status: 200, verified: tpl.Fence},
		{name: "template missing segment", method: "PUT", path: "/tpl", header: H("X-Fence-Token", tpl.Fence), status: 400, reason: "malformed"},
		{name: "dry-run stale passes", method: "POST", path: "/dry/1", header: k1(old.Fence), status: 200, wouldDen: "stale"},
		{name: "policy off", method: "POST", path: "/off/1", status: 200},
		{name: "custom headers", method: "POST", path: "/custom/1", header: H("X-Resource", "orders/1", "If-Fence", cur.Fence), status: 200, verified: cur.Fence},
		{name: "custom methods", method: "PUT", path: "/custom/1", status: 200},
		{name: "client verified header dropped", method: "GET", path: "/orders/1", header: H("X-Fence-Verified", "999999999999999", "X-Fence-Would-Deny", "x"), status: 200},
		{name: "no route", method: "GET", path: "/nowhere", status: 404},
		{name: "prefix is a segment", method: "GET", path: "/ordersX", status: 404},
		{name: "dot segment", method: "POST", path: "/off/../orders/1", status: 400},
		{name: "encoded slash", method: "POST", path: "/off/a%2F..%2Forders", status: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL+tc.path, strings.NewReader("payload"))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", res.StatusCode, tc.status, b)
			}
			if tc.status != 200 {
				select {
				case r := <-got:
					t.Fatalf("a denied request reached the upstream: %+v", r)
				default:
				}
				if tc.reason == "" {
					return
				}
				var d denial
				if err := json.Unmarshal(b, &d); err != nil {
					t.Fatalf("body %q: %v", b, err)
				}
				if d.Error != tc.reason || d.Current != tc.current || d.DecisionID == "" || res.Header.Get("X-Fence-Reason") != tc.reason ||
					res.Header.Get("X-Fence-Decision-Id") != d.DecisionID || res.Header.Get("Content-Type") != "application/json" {
					t.Errorf("denial %d %+v headers %v", res.StatusCode, d, res.Header)
				}
				return
			}
			if string(b) != "upstream ok" || res.Header.Get("X-Upstream") != "1" {
				t.Errorf("response %q %v", b, res.Header)
			}
			r := <-got
			if !strings.HasPrefix(r.path, "/base"+strings.Split(tc.path, "?")[0]) || r.method != tc.method || r.body != "payload" {
				t.Errorf("upstream saw %s %s %q", r.method, r.path, r.body)
			}
			if v := r.header.Get("X-Fence-Lock-Id"); v != "" {
				t.Errorf("x-fence-lock-id reached the upstream: %q", v)
			}
			if v := r.header.Get("X-Fence-Verified"); v != tc.verified {
				t.Errorf("x-fence-verified %q, want %q", v, tc.verified)
			}
			if v := r.header.Get("X-Fence-Would-Deny"); v != tc.wouldDen {
				t.Errorf("x-fence-would-deny %q, want %q", v, tc.wouldDen)
			}
		})
	}
}

// TestProxyHopByHopAndForwarded: hop-by-hop headers (and those named in
// Connection) do not cross the proxy either way; X-Forwarded-* are the
// proxy's, the client's dropped unless trusted.
func TestProxyHopByHopAndForwarded(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	got := make(chan http.Header, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("Host", r.Host)
		got <- h
		w.Header().Set("Connection", "X-Up-Hop")
		w.Header().Set("X-Up-Hop", "secret")
		w.Header().Set("X-Up-End", "kept")
	}))
	t.Cleanup(up.Close)
	for _, trust := range []bool{false, true} {
		_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), []config.Route{{Match: prefix("/"), Upstream: up.URL}}, Options{TrustForwarded: trust})
		res, _ := do(t, "GET", srv.URL+"/x", map[string]string{
			"Connection": "X-Hop", "X-Hop": "1", "Te": "trailers, deflate", "X-Forwarded-For": "6.6.6.6", "X-Forwarded-Host": "evil", "X-Forwarded-Proto": "https",
		}, "")
		h := <-got
		if h.Get("X-Hop") != "" || h.Get("Te") == "trailers, deflate" {
			t.Errorf("hop-by-hop request headers crossed: %v", h)
		}
		if res.Header.Get("X-Up-Hop") != "" || res.Header.Get("X-Up-End") != "kept" {
			t.Errorf("response headers: %v", res.Header)
		}
		srvHost := strings.TrimPrefix(srv.URL, "http://")
		wantXFF, wantHost, wantProto := "127.0.0.1", srvHost, "http"
		if trust {
			wantXFF, wantHost, wantProto = "6.6.6.6, 127.0.0.1", "evil", "https"
		}
		if h.Get("X-Forwarded-For") != wantXFF || h.Get("X-Forwarded-Host") != wantHost || h.Get("X-Forwarded-Proto") != wantProto {
			t.Errorf("trust=%v: X-Forwarded-* = %q %q %q", trust, h.Get("X-Forwarded-For"), h.Get("X-Forwarded-Host"), h.Get("X-Forwarded-Proto"))
		}
		if h.Get("Host") != strings.TrimPrefix(up.URL, "http://") {
			t.Errorf("Host %q, want the upstream's", h.Get("Host"))
		}
	}
}

// TestProxyStreams: neither body is buffered whole. The upstream sees the
// first request chunk before the client sends the second; the client sees
// the first response chunk before the upstream writes the second.
func TestProxyStreams(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	l := locktest.Acquire(t, s, "stream", time.Minute)
	firstIn := make(chan string, 1)
	firstOut := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		br := bufio.NewReader(r.Body)
		line, _ := br.ReadString('\n')
		firstIn <- line
		rest, _ := io.ReadAll(br)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "out-1\n")
		w.(http.Flusher).Flush()
		select {
		case <-firstOut:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "out-2:"+string(rest))
	}))
	t.Cleanup(up.Close)
	reg := prometheus.NewRegistry()
	c := fencecheck.New(s, fencecheck.Options{Registerer: reg})
	p, srv := serveProxy(t, c, []config.Route{{Match: prefix("/"), Upstream: up.URL, Key: "stream", Barrier: true}}, Options{})

	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/s", pr)
	req.Header.Set("X-Fence-Token", l.Fence)
	resc := make(chan *http.Response, 1)
	errc := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			errc <- err
			return
		}
		resc <- res
	}()
	_, _ = io.WriteString(pw, "in-1\n")
	select {
	case line := <-firstIn:
		if line != "in-1\n" {
			t.Fatalf("upstream read %q", line)
		}
	case err := <-errc:
		t.Fatal(err)
	}
	_, _ = io.WriteString(pw, "in-2")
	pw.Close()
	var res *http.Response
	select {
	case res = <-resc:
	case err := <-errc:
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); line != "out-1\n" || err != nil {
		t.Fatalf("first response chunk %q %v", line, err)
	}
	if p.InFlight() != 1 {
		t.Errorf("in flight while the response streams: %d, want 1", p.InFlight())
	}
	close(firstOut)
	rest, _ := io.ReadAll(br)
	if string(rest) != "out-2:in-2" {
		t.Fatalf("rest %q", rest)
	}
	res.Body.Close()
	testutil.WaitFor(t, 30*time.Second, "the write to finish", func() bool { return p.InFlight() == 0 })
	if n := metric(t, reg, "fencegate_barrier_abandoned_total"); n != 0 {
		t.Errorf("abandoned %v, want 0", n)
	}
}

// metric sums a gathered metric's counters and gauges by name (0 when
// absent).
func metric(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return v
}

// TestProxyAudit: a denial through the proxy is an audit event with the
// proxy as its source, the route's name and the client's address, and the
// key's hash only.
func TestProxyAudit(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	old := locktest.Acquire(t, s, "k", time.Minute)
	locktest.Release(t, s, old.LockID)
	cur := locktest.Acquire(t, s, "k", time.Minute)
	up, _ := recorder(t)
	a := fencecheck.NewAuditor(s, fencecheck.AuditorOptions{})
	_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{Audit: a}), []config.Route{{Name: "orders-write", Match: prefix("/"), Upstream: up.URL, Key: "k"}}, Options{})
	res, _ := do(t, "PUT", srv.URL+"/k?q=1", map[string]string{"X-Fence-Token": old.Fence}, "x")
	if res.StatusCode != 409 {
		t.Fatalf("status %d", res.StatusCode)
	}
	_ = a.Close() // flush
	evs, err := s.QueryAudit(t.Context(), lockstore.AuditQuery{Key: "k"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("audit: %v %v", evs, err)
	}
	ev := evs[0]
	if ev.Source != Source || ev.Route != "orders-write" || ev.Reason != "stale" || ev.Presented != old.Fence || ev.Current != cur.Fence ||
		ev.Method != "PUT" || !strings.HasPrefix(ev.Peer, "127.0.0.1:") || ev.Key != "" || ev.Path != "" ||
		ev.DecisionID != res.Header.Get("X-Fence-Decision-Id") {
		t.Fatalf("event %+v", ev)
	}
}
