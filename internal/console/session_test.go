package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/internal/storetelemetry"
	"github.com/fencegate/fencegate/lockstore"
)

func (f *fixture) postForm(t *testing.T, path string, form url.Values, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, req)
}

// TestConsoleLoginSession: the login form trades a token for a session cookie
// that scripts cannot read, other sites cannot send, and only the console
// receives; logout ends the session on the server.
func TestConsoleLoginSession(t *testing.T) {
	f := newFixture(t, false, []auth.Token{
		{Name: "ops", SHA256: auth.HashToken("t-ops"), Operations: []string{"*"}},
		{Name: "worker", SHA256: auth.HashToken("t-worker")},
	})
	if r := f.postForm(t, "/ui/login", url.Values{"token": {"nope"}}); r.status != http.StatusUnauthorized || r.header.Get("Set-Cookie") != "" {
		t.Errorf("wrong token: %d, cookie %q", r.status, r.header.Get("Set-Cookie"))
	}
	if r := f.postForm(t, "/ui/login", url.Values{"token": {"t-worker"}}); r.status != http.StatusForbidden || r.header.Get("Set-Cookie") != "" {
		t.Errorf("token without ui: %d, cookie %q", r.status, r.header.Get("Set-Cookie"))
	}
	for _, h := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Origin", "https://evil.example"}, {"Origin", "null"}} {
		if r := f.postForm(t, "/ui/login", url.Values{"token": {"t-ops"}}, h...); r.status != http.StatusForbidden || r.header.Get("Set-Cookie") != "" {
			t.Errorf("login with %s: %d, want 403 and no cookie", h, r.status)
		}
	}
	r := f.postForm(t, "/ui/login", url.Values{"token": {"t-ops"}}, "Sec-Fetch-Site", "same-origin")
	if r.status != http.StatusSeeOther {
		t.Fatalf("login: %d %s", r.status, r.body)
	}
	resp := &http.Response{Header: r.header}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("login set %d cookies", len(cookies))
	}
	ck := cookies[0]
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui" || ck.Name != cookieName {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui", ck)
	}
	if strings.Contains(ck.Value, "t-ops") || len(ck.Value) < 40 {
		t.Errorf("session cookie value %q: want a random id, not the token", ck.Value)
	}
	withCookie := []string{"Cookie", cookieName + "=" + ck.Value}
	if p := f.get(t, "/ui", withCookie...); p.status != http.StatusOK || !strings.Contains(p.body, "<b>ops</b>") || !strings.Contains(p.body, `action="/ui/logout"`) {
		t.Errorf("page with the session: %d", p.status)
	}
	if p := f.get(t, "/ui", "Cookie", cookieName+"=forged"); p.status != http.StatusUnauthorized {
		t.Errorf("a forged session id: %d, want 401", p.status)
	}
	if out := f.postForm(t, "/ui/logout", nil, append(withCookie, "Sec-Fetch-Site", "same-origin")...); out.status != http.StatusSeeOther ||
		!strings.Contains(out.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("logout: %d, cookie %q", out.status, out.header.Get("Set-Cookie"))
	}
	if p := f.get(t, "/ui", withCookie...); p.status != http.StatusUnauthorized {
		t.Errorf("the session after logout: %d, want 401", p.status)
	}
}

var (
	inlineScript  = regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`)
	eventHandlers = regexp.MustCompile(`(?i)<[^>]*\son[a-z]+\s*=`)
	externalRefs  = regexp.MustCompile(`(?i)(?:src|href)="(?:https?:)?//`)
)

// TestConsoleCSPAndNoInlineCode: every reply carries a CSP that forbids inline
// code and other origins, and no page needs either: no inline script or
// style, no event handler attribute, no external resource.
func TestConsoleCSPAndNoInlineCode(t *testing.T) {
	f := newFixture(t, true, nil)
	f.acquire(t, `orders/<script>alert(1)</script>`)
	f.deny(t, lockstore.AuditEvent{DecisionID: "d1", KeyHash: lockstore.HashKey("x"), Key: `x" onmouseover="alert(1)`})
	for _, path := range []string{"/ui", "/ui/key?key=" + url.QueryEscape(`orders/<script>alert(1)</script>`), "/ui/key?hash=" + lockstore.HashKey("x")} {
		p := f.get(t, path)
		if p.status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, p.status)
		}
		if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
		for name, re := range map[string]*regexp.Regexp{"inline script": inlineScript, "event handler": eventHandlers, "external resource": externalRefs} {
			if m := re.FindString(p.body); m != "" {
				t.Errorf("GET %s: %s %q", path, name, m)
			}
		}
		if strings.Contains(p.body, "style=") || strings.Contains(p.body, "<style") {
			t.Errorf("GET %s: inline style", path)
		}
	}
	// The checks can fail: a page with inline code is caught.
	for _, bad := range []string{`<script>alert(1)</script>`, `<a href="#" onclick="x()">`, `<script src="https://cdn.example/x.js"></script>`} {
		if !inlineScript.MatchString(bad) && !eventHandlers.MatchString(bad) && !externalRefs.MatchString(bad) {
			t.Errorf("the checks miss %q", bad)
		}
	}
	for _, file := range []string{"console.js", "console.css"} {
		p := f.get(t, "/ui/static/"+file)
		if p.status != http.StatusOK || p.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("static %s: %d", file, p.status)
		}
	}
	if p := f.get(t, "/ui/static/nope.js"); p.status != http.StatusNotFound {
		t.Errorf("a missing static file: %d", p.status)
	}
}

// TestConsoleEventsStream: a denial appended to the audit log (as any gateway's
// auditor would) reaches an open stream; shutting the console down ends
// every stream, so a graceful HTTP shutdown is not held by them.
func TestConsoleEventsStream(t *testing.T) {
	f := newFixture(t, false, nil)
	// The gateway's listener has a ReadTimeout; the stream must outlive it.
	f.srv.Close()
	f.srv = httptest.NewUnstartedServer(f.srv.Config.Handler)
	f.srv.Config.ReadTimeout = 300 * time.Millisecond
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/ui/events?locks=0", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if strings.Contains(b.String(), "late-denial") {
				select {
				case got <- b.String():
				default:
				}
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	// Past the listener's ReadTimeout; not synchronisation (the denial is
	// found by the poll window either way).
	time.Sleep(time.Second)
	f.deny(t, lockstore.AuditEvent{DecisionID: "late-denial", KeyHash: lockstore.HashKey("k"), Presented: "000000000000003", Current: "000000000000004"})
	select {
	case s := <-got:
		if !strings.Contains(s, "event: denial\n") || !strings.Contains(s, `"current":"000000000000004"`) {
			t.Errorf("stream: %s", s)
		}
	case <-ctx.Done():
		t.Fatal("the denial did not reach the stream within 30s")
	}
	f.cancel()
	select {
	case err := <-done:
		if err != io.EOF {
			t.Errorf("stream ended with %v, want EOF", err)
		}
	case <-ctx.Done():
		t.Fatal("the stream outlived the console's context")
	}
}

// TestConsoleTimelineEntries: the timeline merges this gateway's operations and
// the denials, newest first, and infers an expiry for a lock that was
// neither released nor extended past now.
func TestConsoleTimelineEntries(t *testing.T) {
	ops := []lockOp{
		{TimeMs: 1000, Kind: opAcquire, KeyHash: "h", LockIDHash: "a", Fence: "000000000000001", ExpiresAtMs: 2000},
		{TimeMs: 4000, Kind: opAcquire, KeyHash: "h", LockIDHash: "b", Fence: "000000000000002", ExpiresAtMs: 9000},
		{TimeMs: 4500, Kind: opRelease, KeyHash: "h", LockIDHash: "b", Fence: "000000000000002"},
	}
	denials := []lockstore.AuditEvent{{TimeMs: 5000, DecisionID: "d", Reason: "stale", Presented: "000000000000001", Current: "000000000000002"}}
	got := timelineEntries(ops, denials, 6000)
	var kinds []string
	for _, e := range got {
		kinds = append(kinds, e.Kind+" "+e.Fence)
	}
	want := "denial 000000000000001, release 000000000000002, acquire 000000000000002, expiry 000000000000001, acquire 000000000000001"
	if strings.Join(kinds, ", ") != want {
		t.Errorf("timeline %q\nwant     %q", strings.Join(kinds, ", "), want)
	}
	if !strings.Contains(got[0].Detail, "presented fence 000000000000001, current fence 000000000000002") {
		t.Errorf("denial detail %q", got[0].Detail)
	}
}

// TestConsoleRecorder: the recorded store remembers successful operations only,
// attributes a release to its key, and keeps the optional interfaces.
func TestConsoleRecorder(t *testing.T) {
	f := newFixture(t, false, nil)
	// Every optional capability of the bolt store is reachable through the
	// recorder, and through the recorder over the telemetry decorator (as
	// serve wires them); the hand-built variants this replaced had no
	// combination for a lister alone or a lister with a counter, and the
	// telemetry decorator dropped LockLister and BarrierSweeper.
	tel := storetelemetry.WithTelemetry(f.store, storetelemetry.TelemetryOptions{OnEvent: func(storetelemetry.LockEvent) {}})
	defer func() { _ = tel.Close() }()
	for name, l := range map[string]lockstore.Locks{"recorded": f.api, "recorded telemetry": f.c.Record(tel)} {
		for iface, ok := range map[string]bool{
			"HeldCounter":         has[lockstore.HeldCounter](l),
			"AuditLog":            has[lockstore.AuditLog](l),
			"LockLister":          has[lockstore.LockLister](l),
			"BarrierSweeper":      has[lockstore.BarrierSweeper](l),
			"Pinger":              has[lockstore.Pinger](l),
			"Describer":           has[lockstore.Describer](l),
			"Store (the backend)": has[lockstore.Store](l),
		} {
			if !ok {
				t.Errorf("the %s lock operations lost lockstore.%s", name, iface)
			}
		}
	}
	a := f.acquire(t, "r/1")
	if r, _ := f.api.Acquire(context.Background(), "r/1", time.Minute); r.OK {
		t.Fatal("second acquire succeeded")
	}
	if _, err := f.api.Extend(context.Background(), a.LockID, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := f.api.Release(context.Background(), a.LockID); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, op := range f.c.rec.ops(func(lockOp) bool { return true }) {
		if op.KeyHash != lockstore.HashKey("r/1") || op.Fence != a.Fence {
			t.Errorf("op %+v: want key r/1, fence %s", op, a.Fence)
		}
		kinds = append(kinds, op.Kind)
	}
	if strings.Join(kinds, ",") != "acquire,extend,release" {
		t.Errorf("recorded %v, want acquire, extend, release", kinds)
	}
	r := NewRecorder(2)
	for i := range 5 {
		r.add(lockOp{Kind: opAcquire, TimeMs: int64(i)})
	}
	if got := r.ops(func(lockOp) bool { return true }); len(got) != 2 || got[0].TimeMs != 3 || got[1].TimeMs != 4 {
		t.Errorf("ring of 2 after 5 adds = %+v", got)
	}
}

// TestConsoleStreamsPerPrincipal: a token that may see nothing gets no
// event stream, and one token holds at most maxStreamsPerPrincipal of them,
// so it cannot take the process's slots from the operator (the probe's
// ui-only token took all 64). The old process-wide counter alone is the
// broken variant: it would open the ninth stream.
func TestConsoleStreamsPerPrincipal(t *testing.T) {
	f := newFixture(t, true, []auth.Token{
		{Name: "ops", SHA256: auth.HashToken("t-ops"), Operations: []string{"ui", "lookup", "audit"}},
		{Name: "watcher", SHA256: auth.HashToken("t-watch"), Operations: []string{"ui", "lookup"}},
		{Name: "uionly", SHA256: auth.HashToken("t-uionly"), Operations: []string{"ui"}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(tok string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/ui/events?locks=0", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
		}
		// An open stream stays open until ctx ends.
		return resp.StatusCode
	}
	if got := open("t-uionly"); got != http.StatusForbidden {
		t.Errorf("a token that may see nothing: %d, want 403", got)
	}
	for i := range maxStreamsPerPrincipal {
		if got := open("t-watch"); got != http.StatusOK {
			t.Fatalf("watcher's stream #%d: %d", i+1, got)
		}
	}
	if got := open("t-watch"); got != http.StatusServiceUnavailable {
		t.Errorf("watcher's stream #%d: %d, want 503 (per-token bound)", maxStreamsPerPrincipal+1, got)
	}
	if got := open("t-ops"); got != http.StatusOK {
		t.Errorf("the operator's stream while the watcher holds its share: %d, want 200", got)
	}
}

// has reports whether lockstore.As finds a T in v.
func has[T any](v any) bool {
	_, ok := lockstore.As[T](v)
	return ok
}
