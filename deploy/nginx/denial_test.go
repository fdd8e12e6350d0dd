package nginx

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/deploy/nginx/nginxtest"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/writeproof"
)

// downStore fails every read of the key "down/1" as an unreachable
// backend would: the edge answers 503 unavailable.
type downStore struct{ lockstore.Store }

func (s downStore) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	if key == "down/1" {
		return lockstore.KeyState{}, &lockstore.Error{Code: lockstore.ServiceUnavailable}
	}
	return s.Store.Inspect(ctx, key)
}

// authAnswer is what the forward-auth edge answered one auth subrequest.
type authAnswer struct {
	header http.Header
	body   []byte
}

// recordingEdge serves forward-auth and keeps every answer by decision id.
// A request for /orders/429 is answered as the edge answers a 429
// (too-many-writes, Retry-After) with fencecheck's own body and headers:
// forward-auth never keeps the barrier, so no real check gives one, and
// the shipped config must still pass it through.
type recordingEdge struct {
	h       http.Handler
	mu      sync.Mutex
	answers map[string]authAnswer
}

func (e *recordingEdge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	if strings.HasPrefix(r.Header.Get("X-Original-URI"), "/orders/429") {
		dec := fencecheck.Decision{Reason: fencecheck.ReasonTooManyWrites, Status: http.StatusTooManyRequests, RetryAfter: 2,
			Key: "orders/429", Presented: "000000000000001", DecisionID: fmt.Sprintf("synthetic-%d", time.Now().UnixNano())}
		body := fencecheck.DenialJSON(dec)
		for _, kv := range fencecheck.DenialHeaders(dec) {
			rec.Header().Set(kv[0], kv[1])
		}
		rec.Header().Set("Cache-Control", "no-store")
		rec.Header().Set(fencewire.HeaderStatus, "429")
		rec.Header().Set(fencewire.HeaderBody, string(body))
		rec.WriteHeader(http.StatusForbidden)
		_, _ = rec.Write(body)
	} else {
		e.h.ServeHTTP(rec, r)
	}
	if id := rec.Header().Get(fencewire.HeaderDecisionID); id != "" {
		e.mu.Lock()
		e.answers[id] = authAnswer{header: rec.Header().Clone(), body: rec.Body.Bytes()}
		e.mu.Unlock()
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (e *recordingEdge) answer(id string) (authAnswer, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a, ok := e.answers[id]
	return a, ok
}

// oldDenied is @fence_denied as shipped before #26: a 403 became
// {"error":"forbidden"}, a 429 too, and Retry-After was dropped.
const oldDenied = `            if ($fence_status = 400) { return 400 $fence_body; }
            if ($fence_status = 409) { return 409 $fence_body; }
            if ($fence_status = 428) { return 428 $fence_body; }
            if ($fence_status = 503) { return 503 $fence_body; }
            return 403 '{"error":"forbidden"}';`

// TestNginxDenialsPassThrough: #26 item 10. Through the shipped config,
// every denial reaches the client with the edge's own status, headers
// (x-fence-reason, x-fence-decision-id, Content-Type, Cache-Control,
// Retry-After) and body, byte for byte, for each status the edge denies
// with: 400, 403, 409, 428, 429, 503 (a non-ASCII key included). The
// broken variant is the config as shipped before: its 403 answered
// {"error":"forbidden"}.
func TestNginxDenialsPassThrough(t *testing.T) {
	store := locktest.OpenBolt(t, locktest.FloorOff)
	sg, err := writeproof.NewSigner([]writeproof.Key{{KID: "k1", Seed: bytes.Repeat([]byte{1}, ed25519.SeedSize)}})
	if err != nil {
		t.Fatal(err)
	}
	old := locktest.Acquire(t, store, "orders/42", time.Minute)
	locktest.Release(t, store, old.LockID)
	cur := locktest.Acquire(t, store, "orders/42", time.Minute)
	pay := locktest.Acquire(t, store, "payments/7", time.Minute)
	edge := &recordingEdge{answers: map[string]authAnswer{},
		h: authz.NewHTTPHandler(fencecheck.New(downStore{store}, fencecheck.Options{Proofs: sg.Verifier()}), authz.Options{})}
	mux := http.NewServeMux()
	mux.Handle(authz.HTTPPath, edge)
	mux.Handle(authz.HTTPPath+"/", edge)
	fg := httptest.NewServer(mux)
	t.Cleanup(fg.Close)
	appSrv := httptest.NewServer(&app{})
	t.Cleanup(appSrv.Close)

	cases := []struct {
		name   string
		call   call
		status int
	}{
		{"400 malformed", call{"PUT", "/orders/42", map[string]string{"X-Fence-Token": "42"}}, 400},
		{"403 bad-proof", call{"PUT", "/payments/7", map[string]string{"X-Fence-Token": pay.Fence}}, 403},
		{"409 stale", call{"PUT", "/orders/42", map[string]string{"X-Fence-Token": old.Fence}}, 409},
		{"428 missing", call{"POST", "/orders/42", nil}, 428},
		{"428 missing, a non-ASCII key", call{"POST", "/other", map[string]string{"X-Fence-Key": "dé/<1>&"}}, 428},
		{"429 too-many-writes", call{"PUT", "/orders/429", nil}, 429},
		{"503 unavailable", call{"POST", "/other", map[string]string{"X-Fence-Key": "down/1", "X-Fence-Token": cur.Fence}}, 503},
	}
	for _, variant := range []struct {
		name   string
		edit   func(string) string
		broken bool
	}{
		{"shipped", nil, false},
		{"broken: @fence_denied before #26", func(s string) string {
			i, j := strings.Index(s, "            if ($fence_status = 400)"), strings.Index(s, "        # fencegate unreachable or broken")
			return s[:i] + oldDenied + "\n        }\n\n" + s[j:]
		}, true},
	} {
		t.Run(variant.name, func(t *testing.T) {
			base := nginxtest.StartEdited(t, fg.Listener.Addr().String(), appSrv.Listener.Addr().String(), "", variant.edit)
			var wrong []string
			for _, tc := range cases {
				resp, body := do(t, base, tc.call)
				id := resp.Header.Get(fencewire.HeaderDecisionID)
				a, ok := edge.answer(id)
				if !ok {
					t.Fatalf("%s: no edge answer for decision id %q (%d %s)", tc.name, id, resp.StatusCode, body)
				}
				if got := a.header.Get(fencewire.HeaderStatus); got != fmt.Sprint(tc.status) {
					t.Fatalf("%s: the edge answered %s, want %d: the case does not produce its status", tc.name, got, tc.status)
				}
				var diffs []string
				if resp.StatusCode != tc.status {
					diffs = append(diffs, fmt.Sprintf("status %d", resp.StatusCode))
				}
				if !bytes.Equal(body, a.body) {
					diffs = append(diffs, fmt.Sprintf("body %q, the edge's %q", body, a.body))
				}
				for _, h := range []string{"Content-Type", "Cache-Control", fencewire.HeaderReason, fencewire.HeaderDecisionID, "Retry-After"} {
					if resp.Header.Get(h) != a.header.Get(h) {
						diffs = append(diffs, fmt.Sprintf("%s %q, the edge's %q", h, resp.Header.Get(h), a.header.Get(h)))
					}
				}
				if len(diffs) > 0 {
					wrong = append(wrong, fmt.Sprintf("%s: %s", tc.name, strings.Join(diffs, "; ")))
				}
			}
			switch {
			case !variant.broken:
				for _, w := range wrong {
					t.Error(w)
				}
			case len(wrong) == 0:
				t.Fatal("the broken config passed every denial through: the test cannot tell")
			default:
				t.Logf("caught: %s", wrong[0])
			}
		})
	}
}

// rawRequest sends one request line as written (a client library would
// cut a '#') and returns the status and body.
func rawRequest(t *testing.T, base, line, headers string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: api.example.com\r\n%sContent-Length: 0\r\nConnection: close\r\n\r\n", line, headers)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestNginxMethodOverrideAndRawHash: #26 items 2 and 3 through the
// shipped config. A GET carrying a method-override header (or a _method
// parameter) is judged as the method it names: at /orders/ a DELETE,
// refused 428 without a fence. A raw '#' in a write's target is refused
// 400 (nginx checks /orders/42 by $uri, but hands the app "/orders/42#x",
// which Go's server keeps whole). The broken variant is the config
// without the override headers on the auth request: the GET reached the
// app, which ran a DELETE.
func TestNginxMethodOverrideAndRawHash(t *testing.T) {
	store := locktest.OpenBolt(t, locktest.FloorOff)
	cur := locktest.Acquire(t, store, "orders/42", time.Minute)
	mux := http.NewServeMux()
	h := authz.NewHTTPHandler(fencecheck.New(store, fencecheck.Options{}), authz.Options{})
	mux.Handle(authz.HTTPPath, h)
	mux.Handle(authz.HTTPPath+"/", h)
	fg := httptest.NewServer(mux)
	t.Cleanup(fg.Close)
	var mu sync.Mutex
	var paths []string
	appSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.RequestURI)
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(appSrv.Close)
	tok := "X-Fence-Token: " + cur.Fence + "\r\n"
	cases := []struct {
		line, headers string
		want          int
	}{
		{"GET /orders/42", "X-HTTP-Method-Override: DELETE\r\n", 428},
		{"GET /orders/42", "X-HTTP-Method: delete\r\n", 428},
		{"GET /orders/42", "X-Method-Override: PUT\r\n", 428},
		{"GET /orders/42", "X-HTTP-Method-Override: DELETE\r\n" + tok, 200},
		{"GET /orders/42?_method=DELETE", "", 428},
		{"GET /orders/42", "", 200},
		{"PUT /orders/42#x", tok, 400},
		{"PUT /orders/42", tok, 200},
		{"GET /orders/42#x", "", 200},
	}
	for _, variant := range []struct {
		name   string
		edit   func(string) string
		broken bool
	}{
		{"shipped", nil, false},
		{"broken: no override headers on the auth request", func(s string) string {
			var out []string
			for _, l := range strings.Split(s, "\n") {
				if !strings.Contains(l, "proxy_set_header X-HTTP-Method") && !strings.Contains(l, "proxy_set_header X-Method-Override") {
					out = append(out, l)
				}
			}
			return strings.Join(out, "\n")
		}, true},
	} {
		t.Run(variant.name, func(t *testing.T) {
			base := nginxtest.StartEdited(t, fg.Listener.Addr().String(), appSrv.Listener.Addr().String(), "", variant.edit)
			var wrong []string
			for _, tc := range cases {
				if st, body := rawRequest(t, base, tc.line, tc.headers); st != tc.want {
					wrong = append(wrong, fmt.Sprintf("%s [%q]: %d %s, want %d", tc.line, tc.headers, st, body, tc.want))
				}
			}
			switch {
			case !variant.broken:
				for _, w := range wrong {
					t.Error(w)
				}
				mu.Lock()
				defer mu.Unlock()
				for _, p := range paths {
					if strings.Contains(p, "#") && p != "/orders/42#x" {
						t.Errorf("the app received %q", p)
					}
				}
			case len(wrong) == 0:
				t.Fatal("the broken config passed every case: the test cannot tell")
			default:
				t.Logf("caught: %s", wrong[0])
			}
		})
	}
}
