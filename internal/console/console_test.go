package console

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/bolt"
)

// fixture is a console over a real bolt store, served by httptest.
type fixture struct {
	store  *bolt.Store
	api    lockstore.Locks // the store as the lock API sees it (recorded)
	c      *Console
	srv    *httptest.Server
	cancel context.CancelFunc
}

func newFixture(t *testing.T, rawKeys bool, tokens []auth.Token) *fixture {
	t.Helper()
	st := locktest.OpenBolt(t)
	var authn *auth.Authenticator
	if tokens != nil {
		var err error
		if authn, err = auth.NewAuthenticator(tokens); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := New(ctx, Options{Store: st, Audit: st, Auth: authn, RawKeys: rawKeys, Logger: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	c.Register(mux, nil)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { cancel(); srv.Close() })
	return &fixture{store: st, api: c.Record(st), c: c, srv: srv, cancel: cancel}
}

func (f *fixture) acquire(t *testing.T, key string) lockstore.AcquireResult {
	t.Helper()
	r, err := f.api.Acquire(context.Background(), key, time.Minute)
	if err != nil || !r.OK {
		t.Fatalf("Acquire(%q) = %+v, %v", key, r, err)
	}
	return r
}

func (f *fixture) deny(t *testing.T, ev lockstore.AuditEvent) {
	t.Helper()
	if ev.TimeMs == 0 {
		ev.TimeMs = time.Now().UnixMilli()
	}
	ev.Source, ev.Reason, ev.Policy, ev.Mode = "authz-http", "stale", "holder", "enforce"
	if err := f.store.AppendAudit(context.Background(), []lockstore.AuditEvent{ev}); err != nil {
		t.Fatal(err)
	}
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (f *fixture) get(t *testing.T, path string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) reply {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// leaks names the secrets that appear in a page.
func leaks(body string, secrets ...string) []string {
	var out []string
	for _, s := range secrets {
		if strings.Contains(body, s) {
			out = append(out, s)
		}
	}
	return out
}

// TestConsoleHashesUnlessRawKeys: with raw keys off, no page and no event shows a
// raw key, from a lock or from an audit event that carries one; a lockId
// is never shown. The same check against a console with raw keys on must
// find the keys (it can fail).
func TestConsoleHashesUnlessRawKeys(t *testing.T) {
	const key, other = "orders/secret-1", "orders/secret-2"
	check := func(t *testing.T, rawKeys bool) []string {
		f := newFixture(t, rawKeys, nil)
		r := f.acquire(t, key)
		f.deny(t, lockstore.AuditEvent{DecisionID: "d1", KeyHash: lockstore.HashKey(other), Key: other, Presented: "000000000000001"})
		var found []string
		for path, hash := range map[string]string{
			"/ui":                                      lockstore.HashKey(key),
			"/ui/key?hash=" + lockstore.HashKey(key):   lockstore.HashKey(key),
			"/ui/key?key=" + url.QueryEscape(key):      lockstore.HashKey(key),
			"/ui/key?hash=" + lockstore.HashKey(other): lockstore.HashKey(other),
		} {
			p := f.get(t, path)
			if p.status != http.StatusOK {
				t.Fatalf("GET %s = %d\n%s", path, p.status, p.body)
			}
			if l := leaks(p.body, r.LockID); len(l) > 0 {
				t.Errorf("GET %s shows the lockId", path)
			}
			if !strings.Contains(p.body, hash) {
				t.Errorf("GET %s lacks the key's hash", path)
			}
			if strings.Contains(path, "key=") {
				continue // the viewer typed the key; echoing it back leaks nothing
			}
			found = append(found, leaks(p.body, key, other)...)
		}
		ev := readEvents(t, f, "/ui/events", "locks", "denial")
		if l := leaks(ev, r.LockID); len(l) > 0 {
			t.Errorf("the event stream shows the lockId")
		}
		return append(found, leaks(ev, key, other)...)
	}
	t.Run("hashes", func(t *testing.T) {
		if l := check(t, false); len(l) > 0 {
			t.Errorf("raw keys shown with raw keys off: %q", l)
		}
	})
	t.Run("broken-variant-raw-keys-on", func(t *testing.T) {
		if l := check(t, true); len(l) == 0 {
			t.Errorf("with raw keys on the check found no raw key: it cannot catch a leak")
		}
	})
}

// readEvents reads the event stream at path until each wanted event type
// arrived once, and returns what it read.
func readEvents(t *testing.T, f *fixture, path string, want ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, ct)
	}
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for len(missing) > 0 && sc.Scan() {
		line := sc.Text()
		b.WriteString(line + "\n")
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			delete(missing, ev)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("event stream ended (%v) without %v:\n%s", sc.Err(), missing, b.String())
	}
	return b.String()
}

// TestConsoleTokenScopes: the ui operation opens the console, lookup and audit
// decide what it shows, and prefixes limit which keys.
func TestConsoleTokenScopes(t *testing.T) {
	f := newFixture(t, true, []auth.Token{
		{Name: "ops", SHA256: auth.HashToken("t-ops"), Operations: []string{"ui", "lookup", "audit"}},
		{Name: "orders", SHA256: auth.HashToken("t-orders"), Prefixes: []string{"orders/"}, Operations: []string{"ui", "lookup", "audit"}},
		{Name: "uionly", SHA256: auth.HashToken("t-uionly"), Operations: []string{"ui"}},
		{Name: "noui", SHA256: auth.HashToken("t-noui"), Operations: []string{"lookup", "audit"}},
	})
	f.acquire(t, "orders/1")
	f.acquire(t, "billing/1")
	f.deny(t, lockstore.AuditEvent{DecisionID: "deny-orders", KeyHash: lockstore.HashKey("orders/1"), Key: "orders/1"})
	f.deny(t, lockstore.AuditEvent{DecisionID: "deny-billing", KeyHash: lockstore.HashKey("billing/1"), Key: "billing/1"})
	f.deny(t, lockstore.AuditEvent{DecisionID: "deny-hashonly", KeyHash: lockstore.HashKey("orders/2")})
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

	if r := f.get(t, "/ui"); r.status != http.StatusUnauthorized || !strings.Contains(r.body, `name="token"`) {
		t.Errorf("no credentials: %d, want 401 with the login form", r.status)
	}
	if r := f.get(t, "/ui", bearer("t-noui")...); r.status != http.StatusForbidden {
		t.Errorf("token without ui: %d, want 403", r.status)
	}
	if r := f.get(t, "/ui/events", bearer("t-noui")...); r.status != http.StatusForbidden {
		t.Errorf("events with a token without ui: %d, want 403", r.status)
	}
	if r := f.get(t, "/ui", bearer("wrong")...); r.status != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", r.status)
	}

	all := f.get(t, "/ui", bearer("t-ops")...)
	for _, want := range []string{"orders/1", "billing/1", "deny-orders", "deny-billing", "deny-hashonly"} {
		if !strings.Contains(all.body, want) {
			t.Errorf("ops token: page lacks %q", want)
		}
	}
	scoped := f.get(t, "/ui", bearer("t-orders")...)
	for _, want := range []string{"orders/1", "deny-orders"} {
		if !strings.Contains(scoped.body, want) {
			t.Errorf("orders token: page lacks %q", want)
		}
	}
	for _, not := range []string{"billing/1", "deny-billing", "deny-hashonly", lockstore.HashKey("billing/1")} {
		if strings.Contains(scoped.body, not) {
			t.Errorf("orders token: page shows %q, outside its prefixes", not)
		}
	}
	uiOnly := f.get(t, "/ui", bearer("t-uionly")...)
	if uiOnly.status != http.StatusOK || strings.Contains(uiOnly.body, "orders/1") || strings.Contains(uiOnly.body, "deny-orders") ||
		!strings.Contains(uiOnly.body, "lacks the <code>lookup</code>") {
		t.Errorf("ui-only token: %d, want the page without locks or denials\n%s", uiOnly.status, uiOnly.body)
	}

	for path, want := range map[string]int{
		"/ui/key?key=orders/1":                           http.StatusOK,
		"/ui/key?key=billing/1":                          http.StatusForbidden,
		"/ui/key?hash=" + lockstore.HashKey("billing/1"): http.StatusForbidden,
		"/ui/key?hash=" + lockstore.HashKey("orders/1"):  http.StatusForbidden,
	} {
		if r := f.get(t, path, bearer("t-orders")...); r.status != want {
			t.Errorf("orders token: GET %s = %d, want %d", path, r.status, want)
		}
	}
	if r := f.get(t, "/ui/key?hash="+lockstore.HashKey("billing/1"), bearer("t-ops")...); r.status != http.StatusOK || !strings.Contains(r.body, "deny-billing") {
		t.Errorf("ops token: billing timeline %d, want 200 with its denial", r.status)
	}
}
