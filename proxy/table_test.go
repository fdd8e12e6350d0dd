package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/routes"
)

// viaUpstream is one upstream for every entry of a test table: entry NAME's
// upstream URL is its URL + "/NAME", and it answers "via=NAME" (the first
// path segment it was sent), so a response says which entry the proxy
// served the request under.
func viaUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		via, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		fmt.Fprintf(w, "via=%s", via)
	}))
	t.Cleanup(up.Close)
	return up
}

// answer is what an edge answered: the status, x-fence-reason, the denial's
// key, and for a forwarded request the entry whose upstream served it.
type answer struct {
	status      int
	reason, key string
	via         string
	body        string
}

func readAnswer(t *testing.T, res *http.Response) answer {
	t.Helper()
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	a := answer{status: res.StatusCode, reason: res.Header.Get("X-Fence-Reason"), body: string(b)}
	if v, ok := strings.CutPrefix(a.body, "via="); ok {
		a.via = v
	}
	var d struct {
		Key string `json:"key"`
	}
	if json.Unmarshal(b, &d) == nil {
		a.key = d.Key
	}
	return a
}

// spelling is one request as a client spells it.
type spelling struct {
	method, target, host string
	header               string // raw header lines, each ending "\r\n"
}

func (s spelling) String() string {
	return fmt.Sprintf("%s %s Host:%q %q", s.method, s.target, s.host, s.header)
}

// rawDo sends sp to addr byte for byte (net/http's client would re-encode
// the method, target and Host).
func rawDo(t *testing.T, addr string, sp spelling) answer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\n%sX-Fence-Token: 000000000000001\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx",
		sp.method, sp.target, sp.host, sp.header)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%v: %v", sp, err)
	}
	return readAnswer(t, res)
}

// forwardAuth asks the forward-auth edge (authz, on the same table) about
// sp, as Caddy or Traefik would (X-Forwarded-Method/-Uri/-Host).
func forwardAuth(t *testing.T, h http.Handler, sp spelling) answer {
	t.Helper()
	r := httptest.NewRequest("GET", authz.HTTPPath, nil)
	r.Header.Set("X-Forwarded-Method", sp.method)
	r.Header.Set("X-Forwarded-Uri", sp.target)
	r.Header.Set("X-Forwarded-Host", sp.host)
	r.Header.Set("X-Fence-Token", "000000000000001")
	for _, line := range strings.Split(strings.TrimSuffix(sp.header, "\r\n"), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			r.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return readAnswer(t, w.Result())
}

// edgeTable is a table with host-, method-, path-type-scoped upstream
// entries and one entry without an upstream; each entry's key is
// "k-NAME", so a denial names the entry that decided it.
func edgeTable(upstream string) []config.Route {
	e := func(name string, m config.RouteMatch, up bool) config.Route {
		r := config.Route{Name: name, Match: m, Key: "k-" + name}
		if up {
			r.Upstream = upstream + "/" + name
		}
		return r
	}
	return []config.Route{
		e("orders-api", config.RouteMatch{Hosts: []string{"api.example.com"}, Path: config.RoutePath{Type: config.RoutePathTemplate, Value: "/orders/{int}"}}, true),
		e("orders-delete", config.RouteMatch{Methods: []string{"DELETE"}, Path: config.RoutePath{Value: "/orders"}}, true),
		e("orders", prefix("/orders"), true),
		e("health", config.RouteMatch{Path: config.RoutePath{Type: config.RoutePathExact, Value: "/health/write"}}, true),
		e("internal", prefix("/internal"), false),
		e("any", prefix("/"), true),
	}
}

// edgeSpellings are requests in the spellings every edge must read alike:
// hosts (case, trailing dot, port, malformed), methods (case, overrides,
// _method), paths (readings, path types), and reads.
var edgeSpellings = []spelling{
	{"PUT", "/orders/42", "api.example.com", ""},
	{"PUT", "/orders/42", "API.Example.COM.", ""},
	{"PUT", "/orders/42", "api.example.com:8443", ""},
	{"PUT", "/orders/42", "other.example.com", ""},
	{"PUT", "/orders/abc", "api.example.com", ""},
	{"PUT", "/orders/42", "api..example.com", ""},
	{"PUT", "/orders/42", "api.example.com:x", ""},
	{"DELETE", "/orders/42", "other.example.com", ""},
	{"DELETE", "/orders/42", "api.example.com", ""},
	{"delete", "/orders/42", "other.example.com", ""},
	{"PUT", "/orders/42?_method=DELETE", "other.example.com", ""},
	{"POST", "/orders/42", "other.example.com", "X-HTTP-Method-Override: DELETE\r\n"},
	{"PUT", "/ORDERS/42", "other.example.com", ""},
	{"PUT", "/orders./42", "other.example.com", ""},
	{"PUT", "/%EF%BD%8F%EF%BD%92%EF%BD%84%EF%BD%85%EF%BD%92%EF%BD%93/42", "other.example.com", ""},
	{"PUT", "/health/write", "x", ""},
	{"PUT", "/health/write/1", "x", ""},
	{"PUT", "/internal/1", "x", ""},
	{"PUT", "/other", "x", ""},
	{"GET", "/orders/42", "api.example.com", ""},
	{"GET", "/orders/42", "other.example.com", ""},
	{"GET", "/internal/1", "x", ""},
	{"GET", "/ORDERS/42", "x", ""},
}

// sameDecision says how the proxy's answer p differs from what the
// forward-auth edge decided (a), "" when they agree: a refusal the table
// makes (400 malformed) is the proxy's too; a write denied under an entry
// is denied the same way under the same entry by the proxy, or, when that
// entry has no upstream, refused 404 (nowhere to send it); a read the
// authz edge passes is forwarded to the upstream of the entry the table
// matches, or refused 404 when it has none, or 400 malformed when the
// table finds no one entry for it.
func sameDecision(tbl *routes.Table, sp spelling, a, p answer) string {
	switch {
	case a.status == http.StatusBadRequest:
		override := strings.Contains(sp.header, "Override")
		if p.status != http.StatusBadRequest || (p.reason != "malformed" && !override) {
			return fmt.Sprintf("authz refused it 400 %s, the proxy answered %d %q %q", a.reason, p.status, p.reason, p.body)
		}
		return ""
	case a.status == http.StatusOK:
		path, _, _ := strings.Cut(sp.target, "?")
		e, err := tbl.Match(sp.host, path, sp.method)
		switch {
		case err != nil:
			// Authz passes such a read to whatever the proxy in front
			// picks; the proxy is what picks, and has no one entry.
			if p.status != http.StatusBadRequest || p.reason != "malformed" {
				return fmt.Sprintf("a read with no one entry (%v): the proxy answered %d %q", err, p.status, p.body)
			}
		case e != nil && e.Upstream != nil:
			if p.status != http.StatusOK || p.via != e.Name {
				return fmt.Sprintf("a read of entry %q: the proxy answered %d via %q", e.Name, p.status, p.via)
			}
		case p.status != http.StatusNotFound:
			return fmt.Sprintf("a read of an entry without an upstream: the proxy answered %d via %q", p.status, p.via)
		}
		return ""
	case a.key == "":
		return fmt.Sprintf("authz answered %d %q without a key", a.status, a.body)
	}
	name := strings.TrimPrefix(a.key, "k-")
	e := tbl.Named(name)
	if e == nil {
		return fmt.Sprintf("authz decided under key %q, no entry", a.key)
	}
	if e.Upstream == nil {
		if p.status != http.StatusNotFound {
			return fmt.Sprintf("entry %q has no upstream: the proxy answered %d %q, want 404", name, p.status, p.body)
		}
		return ""
	}
	if p.status != a.status || p.reason != a.reason || p.key != a.key {
		return fmt.Sprintf("authz: %d %s under %q; the proxy: %d %s under %q (via %q)", a.status, a.reason, a.key, p.status, p.reason, p.key, p.via)
	}
	return ""
}

// TestProxyAndAuthzDecideAlike: the proxy and the forward-auth edge, on
// one route table and one store, decide every spelling of edgeSpellings
// under the same entry, the same way (sameDecision). The broken variant,
// the proxy's own prefix matcher before #27 (prefixMatch: upstream entries
// only, by path prefix), disagrees, and the test catches it.
func TestProxyAndAuthzDecideAlike(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	c := fencecheck.New(s, fencecheck.Options{})
	up := viaUpstream(t)
	entries := edgeTable(up.URL)
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			_, srv, h := serveHolder(t, c, entries, brokenIf(broken))
			fa := authz.NewHTTPHandler(c, authz.Options{Routes: h})
			addr := strings.TrimPrefix(srv.URL, "http://")
			var diffs []string
			for _, sp := range edgeSpellings {
				if d := sameDecision(h.Load(), sp, forwardAuth(t, fa, sp), rawDo(t, addr, sp)); d != "" {
					diffs = append(diffs, fmt.Sprintf("%v: %s", sp, d))
				}
			}
			if broken {
				if len(diffs) == 0 {
					t.Fatal("the prefix-only matcher decided as authz: the test cannot fail")
				}
				t.Logf("broken proxy caught: %d of %d spellings differ, e.g. %s", len(diffs), len(edgeSpellings), diffs[0])
				return
			}
			for _, d := range diffs {
				t.Error(d)
			}
		})
	}
}

// TestProxyHostAndMethodEntries: entries scoped by host, method and path
// type are served, each to its own upstream under its own key; an entry
// without an upstream, and what no entry matches, are refused 404 and
// reach no upstream.
func TestProxyHostAndMethodEntries(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	up := viaUpstream(t)
	entries := edgeTable(up.URL)
	// Without the catch-all: a path no entry matches.
	_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), entries[:len(entries)-1], Options{})
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		sp     spelling
		status int
		via    string // the entry whose upstream served it
		key    string // the key a write was denied under
	}{
		{spelling{"GET", "/orders/42", "api.example.com", ""}, 200, "orders-api", ""},
		{spelling{"GET", "/orders/42", "www.example.com", ""}, 200, "orders", ""},
		{spelling{"GET", "/orders/abc", "api.example.com", ""}, 200, "orders", ""},
		{spelling{"DELETE", "/orders/42", "www.example.com", ""}, 409, "", "k-orders-delete"},
		{spelling{"GET", "/health/write", "x", ""}, 200, "health", ""},
		{spelling{"PUT", "/orders/42", "api.example.com", ""}, 409, "", "k-orders-api"},
		{spelling{"PUT", "/health/write", "x", ""}, 409, "", "k-health"},
		{spelling{"GET", "/internal/x", "x", ""}, 404, "", ""},
		{spelling{"PUT", "/internal/x", "x", ""}, 404, "", ""},
		{spelling{"GET", "/health/write/x", "x", ""}, 404, "", ""},
		{spelling{"PUT", "/elsewhere", "x", ""}, 404, "", ""},
	} {
		a := rawDo(t, addr, tc.sp)
		if a.status != tc.status || a.via != tc.via || a.key != tc.key {
			t.Errorf("%v: %d via %q key %q (%s), want %d via %q key %q", tc.sp, a.status, a.via, a.key, a.body, tc.status, tc.via, tc.key)
		}
	}
}

// TestProxyReloadSwapsUpstreams: a table swapped into the holder (what the
// reloader does on SIGHUP or a changed file) applies to the next request,
// without a restart: a moved upstream, a new entry, an entry gone. A
// barrier write admitted under the old table finishes on its old entry
// (its upstream, its completion), and the key's next write is admitted
// once it has. The broken variant (a proxy that keeps the table it
// started with, as its routes were before #27) is caught.
func TestProxyReloadSwapsUpstreams(t *testing.T) {
	t.Run("broken", func(t *testing.T) {
		up := viaUpstream(t)
		_, srv, h := serveHolder(t, fencecheck.New(nil, fencecheck.Options{}), []config.Route{{Name: "a", Match: prefix("/a"), Upstream: up.URL + "/old"}}, Options{pinTable: true})
		h.Store(table(t, []config.Route{{Name: "a", Match: prefix("/a"), Upstream: up.URL + "/new"}}))
		res, err := http.Get(srv.URL + "/a/1")
		if err != nil {
			t.Fatal(err)
		}
		if a := readAnswer(t, res); a.via != "old" {
			t.Fatalf("the pinned proxy served %q: the test cannot tell", a.via)
		}
	})
	s := locktest.OpenBolt(t, locktest.FloorOff)
	c := fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond})
	held := newHeldUpstream(t)
	up := viaUpstream(t)
	p, srv, h := serveHolder(t, c, []config.Route{
		{Name: "acct", Match: prefix("/acct"), Upstream: held.srv.URL, Key: "acct", Barrier: true, MaxWrite: dur(time.Minute), MaxWait: dur(50 * time.Millisecond)},
		{Name: "a", Match: prefix("/a"), Upstream: up.URL + "/old"},
	}, Options{})
	get := func(path string) answer {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		return readAnswer(t, res)
	}
	if a := get("/a/1"); a.via != "old" {
		t.Fatalf("before the reload: %d via %q", a.status, a.via)
	}
	l1 := locktest.Acquire(t, s, "acct", time.Minute)
	w1 := startHeldWrite(t, held, srv.URL+"/acct/1", l1.Fence)

	// The reload: /a's upstream moves, /b appears, /acct's entry changes
	// its upstream (the held write keeps the old one).
	h.Store(table(t, []config.Route{
		{Name: "acct", Match: prefix("/acct"), Upstream: up.URL + "/acct-new", Key: "acct", Barrier: true, MaxWrite: dur(time.Minute), MaxWait: dur(50 * time.Millisecond)},
		{Name: "a", Match: prefix("/a"), Upstream: up.URL + "/new"},
		{Name: "b", Match: prefix("/b"), Upstream: up.URL + "/b"},
	}))
	if a := get("/a/1"); a.via != "new" {
		t.Errorf("after the reload: %d via %q, want the new upstream", a.status, a.via)
	}
	if a := get("/b/1"); a.via != "b" {
		t.Errorf("a new entry: %d via %q", a.status, a.via)
	}
	if n := p.InFlight(); n != 1 {
		t.Fatalf("in flight across the reload: %d, want the held write", n)
	}
	l2 := locktest.HandOver(t, s, l1, "acct", time.Minute)
	w2 := sendWrite(t, srv.URL+"/acct/1", l2.Fence, false)
	if code := <-w2; code != http.StatusTooManyRequests {
		t.Fatalf("the next fence while the old entry's write is in flight: %d, want 429 draining", code)
	}
	held.unblock()
	if code := <-w1; code != http.StatusOK {
		t.Fatalf("the held write, finished on its old entry: %d", code)
	}
	testWaitIdle(t, p)
	res, body, err := post(t.Context(), t, srv.URL+"/acct/1", l2.Fence, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || body != "via=acct-new" {
		t.Errorf("the next write, after completion: %d %q, want 200 via the new upstream", res.StatusCode, body)
	}

	// A table left with no upstream entry serves nothing (cmd refuses to
	// swap one in; the proxy fails closed if handed one).
	h.Store(table(t, []config.Route{{Name: "authz-only", Key: "k"}}))
	if a := get("/a/1"); a.status != http.StatusNotFound {
		t.Errorf("no upstream entry: %d, want 404", a.status)
	}
}

// testWaitIdle waits until p has no barrier write in flight.
func testWaitIdle(t *testing.T, p *Proxy) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.InFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d barrier writes still in flight", p.InFlight())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
