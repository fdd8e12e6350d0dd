// Package nginx holds fencegate's shipped nginx configuration; its test runs
// the real nginx binary with it.
package nginx

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/deploy/nginx/nginxtest"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

// app is the protected upstream: it records the headers of what reached it.
type app struct {
	mu   sync.Mutex
	seen []http.Header
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Header.Clone())
	a.mu.Unlock()
	w.Header().Set("X-App", "reached")
	fmt.Fprintf(w, "ok %s %s", r.Method, r.URL.Path)
}

func (a *app) last() http.Header {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		return nil
	}
	return a.seen[len(a.seen)-1]
}

func (a *app) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

type call struct {
	method, path string
	headers      map[string]string
}

func do(t *testing.T, base string, c call) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

type denial struct {
	Error, Key, Presented, Current, DecisionID string
}

func TestNginxForwardAuth(t *testing.T) {
	store := locktest.OpenBolt(t, locktest.FloorOff)
	lock := func(key string) lockstore.AcquireResult {
		r, err := store.Acquire(t.Context(), key, time.Minute)
		if err != nil || !r.OK {
			t.Fatalf("acquire: %+v %v", r, err)
		}
		return r
	}
	old := lock("orders/42")
	if _, err := store.Release(t.Context(), old.LockID); err != nil {
		t.Fatal(err)
	}
	cur := lock("orders/42")
	other, _ := lockstore.NewLockID()

	mux := http.NewServeMux()
	h := authz.NewHTTPHandler(fencecheck.New(store, fencecheck.Options{}), authz.Options{})
	mux.Handle(authz.HTTPPath, h)
	mux.Handle(authz.HTTPPath+"/", h)
	fg := httptest.NewServer(mux)
	t.Cleanup(fg.Close)
	up := &app{}
	appSrv := httptest.NewServer(up)
	t.Cleanup(appSrv.Close)
	base := nginxtest.Start(t, fg.Listener.Addr().String(), appSrv.Listener.Addr().String())

	type want struct {
		status  int
		reason  string // "" = reached the app
		current string
	}
	tests := []struct {
		name string
		call call
		want want
	}{
		{"current fence passes, lockId stripped", call{"PUT", "/orders/42", map[string]string{
			"X-Fence-Token": cur.Fence, "X-Fence-Lock-Id": cur.LockID}}, want{200, "", ""}},
		{"stale", call{"PUT", "/orders/42", map[string]string{"X-Fence-Token": old.Fence}}, want{409, "stale", cur.Fence}},
		{"missing", call{"POST", "/orders/42", nil}, want{428, "missing", ""}},
		{"malformed", call{"DELETE", "/orders/42", map[string]string{"X-Fence-Token": "42"}}, want{400, "malformed", ""}},
		{"wrong owner", call{"PATCH", "/orders/42", map[string]string{"X-Fence-Token": cur.Fence, "X-Fence-Lock-Id": other}},
			want{409, "wrong-owner", cur.Fence}},
		{"GET passes without fence", call{"GET", "/orders/42", map[string]string{"X-Fence-Verified": "forged"}}, want{200, "", ""}},
		{"client cannot pose as a read", call{"PUT", "/orders/42", map[string]string{
			"X-Forwarded-Method": "GET", "X-Original-Method": "GET", "X-Fence-Route-Policy": "off"}}, want{428, "missing", ""}},
		{"default route takes the key header", call{"POST", "/other", map[string]string{
			"X-Fence-Key": "orders/42", "X-Fence-Token": cur.Fence}}, want{200, "", ""}},
		{"read-only location is not checked", call{"POST", "/catalog/x", nil}, want{200, "", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := up.count()
			resp, body := do(t, base, tc.call)
			if resp.StatusCode != tc.want.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.want.status, body)
			}
			if tc.want.reason == "" {
				if resp.Header.Get("X-App") != "reached" {
					t.Fatalf("did not reach the app: %v %s", resp.Header, body)
				}
				seen := up.last()
				if got := seen.Get("X-Fence-Lock-Id"); got != "" {
					t.Errorf("lockId reached the app: %q", got)
				}
				wantVerified := ""
				if tc.call.method != "GET" && !strings.HasPrefix(tc.call.path, "/catalog/") {
					wantVerified = cur.Fence
				}
				if got := seen.Get("X-Fence-Verified"); got != wantVerified {
					t.Errorf("app saw X-Fence-Verified %q, want %q", got, wantVerified)
				}
				return
			}
			if resp.Header.Get("X-App") != "" || up.count() != before {
				t.Fatal("a denied request reached the app")
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("content-type %q", ct)
			}
			if r := resp.Header.Get("X-Fence-Reason"); r != tc.want.reason {
				t.Errorf("X-Fence-Reason %q, want %q", r, tc.want.reason)
			}
			var d denial
			if err := json.Unmarshal(body, &d); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if d.Error != tc.want.reason || d.Current != tc.want.current || d.DecisionID == "" ||
				d.DecisionID != resp.Header.Get("X-Fence-Decision-Id") {
				t.Fatalf("body %+v, headers %v", d, resp.Header)
			}
			if tc.want.reason != "missing" && tc.want.reason != "malformed" && d.Key != "orders/42" {
				t.Fatalf("key %q", d.Key)
			}
		})
	}

	t.Run("backend down is 503", func(t *testing.T) {
		_ = store.Close()
		resp, body := do(t, base, call{"PUT", "/orders/42", map[string]string{"X-Fence-Token": cur.Fence}})
		var d denial
		if resp.StatusCode != 503 || json.Unmarshal(body, &d) != nil || d.Error != "unavailable" || d.DecisionID == "" {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		// Reads still pass: they never consult the backend.
		if resp, _ := do(t, base, call{"GET", "/orders/42", nil}); resp.StatusCode != 200 {
			t.Fatalf("GET with the backend down: %d", resp.StatusCode)
		}
	})
	t.Run("fencegate down is 503", func(t *testing.T) {
		fg.Close()
		resp, body := do(t, base, call{"PUT", "/orders/42", map[string]string{"X-Fence-Token": cur.Fence}})
		var d denial
		if resp.StatusCode != 503 || json.Unmarshal(body, &d) != nil || d.Error != "unavailable" ||
			resp.Header.Get("X-Fence-Reason") != "unavailable" {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
}

// TestNginxForwardAuthCredential: against a gateway with tokens, the
// shipped config passes the check only with the credential line filled
// in; with the shipped empty value every checked request is answered 401
// and reaches neither the app nor the store.
func TestNginxForwardAuthCredential(t *testing.T) {
	store := locktest.OpenBolt(t, locktest.FloorOff)
	cur, err := store.Acquire(t.Context(), "orders/42", time.Minute)
	if err != nil || !cur.OK {
		t.Fatalf("acquire: %+v %v", cur, err)
	}
	const token = "proxy-token"
	h := authz.NewHTTPHandler(fencecheck.New(store, fencecheck.Options{}), authz.Options{
		Authenticate: func(credential string) (authz.KeyScope, error) {
			if credential != "Bearer "+token {
				return nil, authz.ErrUnauthenticated
			}
			return func(key string) bool { return strings.HasPrefix(key, "orders/") }, nil
		},
	})
	mux := http.NewServeMux()
	mux.Handle(authz.HTTPPath, h)
	mux.Handle(authz.HTTPPath+"/", h)
	fg := httptest.NewServer(mux)
	t.Cleanup(fg.Close)
	up := &app{}
	appSrv := httptest.NewServer(up)
	t.Cleanup(appSrv.Close)

	for _, tc := range []struct {
		name       string
		credential string
		write      int // status of a current-fence PUT
	}{
		{"credential configured", "Bearer " + token, 200},
		{"shipped empty credential", "", 401},
		{"wrong credential", "Bearer nope", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := nginxtest.StartWithCredential(t, fg.Listener.Addr().String(), appSrv.Listener.Addr().String(), tc.credential)
			before := up.count()
			resp, body := do(t, base, call{"PUT", "/orders/42", map[string]string{"X-Fence-Token": cur.Fence}})
			if resp.StatusCode != tc.write {
				t.Fatalf("PUT: status %d, want %d; body %s", resp.StatusCode, tc.write, body)
			}
			if reached := up.count() != before; reached != (tc.write == 200) {
				t.Fatalf("reached the app: %v", reached)
			}
			if tc.write != 200 && resp.Header.Get("X-Fence-Decision-Id") != "" {
				t.Fatalf("a refused caller got a decision: %v", resp.Header)
			}
		})
	}
}
