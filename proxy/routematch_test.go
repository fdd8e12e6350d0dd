package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/routes"
)

// frameworks are upstream routers with the habits of real ones, written
// here independently of the proxy's readings: each says whether it serves
// a (decoded) path with its /orders handler.
var frameworks = []struct {
	name   string
	orders func(p string) bool
}{
	{"exact (Go ServeMux, Rails)", func(p string) bool { return segments(p)[0] == "orders" }},
	{"case-insensitive (ASP.NET, Express)", func(p string) bool { return strings.EqualFold(segments(p)[0], "orders") }},
	{"trailing dots and spaces trimmed (IIS)", func(p string) bool {
		segs := segments(p)
		return strings.TrimRight(segs[0], ". \t\u00a0") == "orders"
	}},
	{"decodes twice", func(p string) bool {
		d, err := url.PathUnescape(p)
		return err == nil && segments(d)[0] == "orders"
	}},
	{"NFKC", func(p string) bool {
		return segments(strings.ReplaceAll(norm.NFKC.String(p), "\\", "/"))[0] == "orders"
	}},
	{"all of them", func(p string) bool {
		if d, err := url.PathUnescape(p); err == nil {
			p = d
		}
		p = strings.ReplaceAll(norm.NFKC.String(p), "\\", "/")
		for _, s := range strings.Split(p, "/") {
			if s = strings.TrimRightFunc(s, func(r rune) bool { return r == '.' || unicode.IsSpace(r) }); s != "" {
				return strings.EqualFold(s, "orders")
			}
		}
		return false
	}},
}

func segments(p string) []string {
	return append(strings.Split(strings.TrimPrefix(p, "/"), "/"), "")
}

// TestProxyRouteReadings: routes /orders (key from the path) and / (key
// from x-fence-key), both to one upstream that records which route the
// request came through. For every spelling, no upstream framework habit
// may serve with its /orders handler a request the proxy checked under the
// catch-all route (the client's own key): such spellings are refused 400
// malformed and audited; plain spellings pass. The broken variant (the
// proxy's own prefix matcher before #27, exact matching alone) lets them
// through, and the test catches it.
func TestProxyRouteReadings(t *testing.T) {
	spellings := []struct {
		path string
		ok   bool // not refused: every reading routes it the same way
	}{
		{"/orders/42", true}, {"/orders/42/", true}, {"/ordersx/1", true}, {"/other/42", true}, {"/Other/42", true},
		{"/orders/ABC", true}, {"/x/orders", true}, {"/orders./42/", false},
		{"/ORDERS/42", false}, {"/Orders/42", false}, {"/ORDERS", false}, {"/oRdErS", false},
		{"/orders./42", false}, {"/orders../42", false}, {"/orders%20/42", false}, {"/orders.%20./42", false},
		{"/orders%09/42", false}, {"/orders%C2%A0/42", false}, {"/%20orders/42", false}, {"/orders.", false},
		{"/orders%252F42", false}, {"/orders%2520/42", false}, {"/%256Frders/42", false},
		{"/%EF%BD%8F%EF%BD%92%EF%BD%84%EF%BD%85%EF%BD%92%EF%BD%93/42", false}, // fullwidth "ｏｒｄｅｒｓ"
		{"/orders%EF%BC%8F42", false},                                         // fullwidth solidus
		{"/orders%EF%BC%BC42", false},                                         // fullwidth backslash
		{"/order%C5%BF/42", false},                                            // long s: upper-cases to S
		{"/x/%EF%BC%8E%EF%BC%8E/orders/42", false},                            // fullwidth dot segment
		{"/ORDERS%2E/42", false},
	}
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			s := locktest.OpenBolt(t, locktest.FloorOff)
			mine := locktest.Acquire(t, s, "mine", time.Minute)
			type hit struct{ via, path string }
			hits := make(chan hit, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				via, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
				hits <- hit{via: via, path: "/" + rest}
			}))
			t.Cleanup(up.Close)
			a := fencecheck.NewAuditor(s, fencecheck.AuditorOptions{})
			_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{Audit: a}), []config.Route{
				{Name: "orders", Match: prefix("/orders"), Upstream: up.URL + "/tpl", Key: "orders/{2}"},
				{Name: "any", Match: prefix("/"), Upstream: up.URL + "/hdr"},
			}, brokenIf(broken))

			var violations []string
			refused := 0
			for _, sp := range spellings {
				req, err := http.NewRequestWithContext(t.Context(), "PUT", srv.URL+sp.path, strings.NewReader("x"))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Fence-Key", "mine")
				req.Header.Set("X-Fence-Token", mine.Fence)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				var h hit
				select {
				case h = <-hits:
				default:
				}
				if h.via == "hdr" {
					for _, f := range frameworks {
						if f.orders(h.path) {
							violations = append(violations, fmt.Sprintf("%s reached the %s upstream's /orders handler checked under the client's own key", sp.path, f.name))
						}
					}
				}
				if broken {
					continue
				}
				switch {
				case sp.ok && res.StatusCode == http.StatusBadRequest:
					t.Errorf("%s: refused, want it routed", sp.path)
				case !sp.ok && (res.StatusCode != http.StatusBadRequest || res.Header.Get("X-Fence-Reason") != "malformed" || res.Header.Get("X-Fence-Decision-Id") == ""):
					t.Errorf("%s: %d %v, want 400 malformed", sp.path, res.StatusCode, res.Header)
				case !sp.ok:
					refused++
					if h.via != "" {
						t.Errorf("%s: refused but reached the upstream", sp.path)
					}
				}
			}
			if broken {
				if len(violations) == 0 {
					t.Fatal("the prefix-only matcher passed: the test cannot fail")
				}
				t.Logf("broken proxy caught: %d violations, e.g. %s", len(violations), violations[0])
				return
			}
			for _, v := range violations {
				t.Error(v)
			}
			_ = a.Close() // flush
			evs, err := s.QueryAudit(t.Context(), lockstore.AuditQuery{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, ev := range evs {
				if ev.Reason == "malformed" && ev.Source == Source && ev.Method == "PUT" {
					n++
				}
			}
			if n != refused {
				t.Errorf("%d malformed audit events, want one per refused path (%d)", n, refused)
			}
		})
	}
}

// TestProxyPrefixNotFolded: with a route prefix that a reading changes
// ("/Orders"), a plain lower-case path is matched again too: /orders/42,
// which the catch-all matches exactly, is /Orders/42 to a case-insensitive
// upstream, and is refused.
func TestProxyPrefixNotFolded(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	up, got := recorder(t)
	u := up.URL
	_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), []config.Route{
		{Name: "orders", Match: prefix("/Orders"), Upstream: u, Key: "orders/{2}"},
		{Name: "any", Match: prefix("/"), Upstream: u},
	}, Options{})
	for path, want := range map[string]int{"/orders/42": 400, "/Orders/42": 200, "/other/42": 200} {
		if res, _ := do(t, "GET", srv.URL+path, nil, ""); res.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, res.StatusCode, want)
		}
		if want == 200 {
			<-got
		}
	}
}

// TestRouteReadingsCollide: prefixes that one upstream reading makes one
// are refused when the table is compiled.
func TestRouteReadingsCollide(t *testing.T) {
	const u = "http://up"
	for _, pair := range [][2]string{{"/Orders", "/orders"}, {"/a.", "/a"}, {"/%EF%BD%81", "/a"}, {"/a%2520b", "/a%20b"}} {
		_, err := routes.Compile([]config.Route{
			{Name: "one", Match: prefix(pair[0]), Upstream: u}, {Name: "two", Match: prefix(pair[1]), Upstream: u},
		}, routes.Options{})
		if err == nil || !strings.Contains(err.Error(), "reads paths") {
			t.Errorf("%q and %q: %v, want refused", pair[0], pair[1], err)
		}
	}
	table(t, []config.Route{
		{Name: "one", Match: prefix("/orders"), Upstream: u}, {Name: "two", Match: prefix("/orders/x"), Upstream: u}, {Name: "all", Match: prefix("/"), Upstream: u},
	})
}

// BenchmarkRequestHygiene measures what routing (the table's matcher, its
// readings), the method override check and header stripping add to one
// request (three entries, a typical path and header set).
func BenchmarkRequestHygiene(b *testing.B) {
	const u = "http://up"
	p, err := New(fencecheck.New(nil, fencecheck.Options{}), routes.NewHolder(table(b, []config.Route{
		{Name: "orders", Match: prefix("/orders"), Upstream: u, Key: "orders/{2}"},
		{Name: "users", Match: prefix("/api/users"), Upstream: u},
		{Name: "any", Match: prefix("/"), Upstream: u},
	})), Options{})
	if err != nil {
		b.Fatal(err)
	}
	h := http.Header{}
	for _, k := range []string{"Accept", "Content-Type", "User-Agent", "X-Fence-Token", "Traceparent", "Authorization", "Accept-Encoding", "X-Request-Id"} {
		h.Set(k, "v")
	}
	r := httptest.NewRequest("PUT", "/orders/12345/items", nil)
	r.Header = h
	b.ReportAllocs()
	for b.Loop() {
		s := p.load()
		e, err := s.table.MatchRequest(r.Host, p.input(r))
		if err != nil || s.up[e] == nil || methodOverride(h) != "" {
			b.Fatal("refused")
		}
		out := h.Clone()
		s.up[e].headers.strip(out)
	}
}

// prefixMatch is the proxy's own matcher before #27, kept as the broken
// variant the tests must catch: the entries with an upstream alone, by the
// longest path prefix of the decoded path, ignoring hosts, methods, path
// types and every other reading of the path or method.
func prefixMatch(t *routes.Table, _ string, in fencecheck.Input) (*routes.Entry, error) {
	path, _, _ := strings.Cut(in.Path, "?")
	decoded, err := url.PathUnescape(path)
	if err != nil {
		return nil, err
	}
	var best *routes.Entry
	bestLen := -1
	for _, e := range t.Entries() {
		if e.Upstream == nil {
			continue
		}
		pfx := strings.TrimSuffix(e.Config.Match.Path.Value, "/")
		if d, err := url.PathUnescape(pfx); err == nil {
			pfx = d
		}
		if (pfx == "" || decoded == pfx || strings.HasPrefix(decoded, pfx+"/")) && len(pfx) > bestLen {
			best, bestLen = e, len(pfx)
		}
	}
	return best, nil
}

// brokenIf is the options of the broken variant (prefixMatch) when broken.
func brokenIf(broken bool) Options {
	if broken {
		return Options{match: prefixMatch}
	}
	return Options{}
}
