package authz

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

// quiet drops the warnings these tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// countingStore counts backend reads, to show a refusal never reads.
type countingStore struct {
	lockstore.Store
	inspects atomic.Int64
}

func (c *countingStore) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	c.inspects.Add(1)
	return c.Store.Inspect(ctx, key)
}

// edgeCheck sends one write through an edge and returns the status and
// x-fence-reason the proxy would answer with.
type edgeCheck func(t *testing.T, method, path, tpl, fence string) (int, string)

// edges runs the same check through every transport and convention: gRPC
// ext_authz, and forward-auth as Envoy http_service, nginx and
// Caddy/Traefik call it.
func edges(t *testing.T, c *fencecheck.Checker) map[string]edgeCheck {
	client := authv3.NewAuthorizationClient(serveGRPC(t, c))
	h := NewHTTPHandler(c, Options{Logger: quiet})
	serve := func(r *http.Request) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Header().Get(fencewire.HeaderReason)
	}
	return map[string]edgeCheck{
		"grpc": func(t *testing.T, method, path, tpl, fence string) (int, string) {
			resp, err := client.Check(t.Context(), envoyRequest(method, path,
				map[string]string{fencewire.HeaderToken: fence}, map[string]string{fencewire.ExtKey: tpl}))
			if err != nil {
				t.Fatal(err)
			}
			if d := resp.GetDeniedResponse(); d != nil {
				return int(d.GetStatus().GetCode()), headerMap(d.GetHeaders())[fencewire.HeaderReason]
			}
			return 200, ""
		},
		"http-envoy": func(t *testing.T, method, path, tpl, fence string) (int, string) {
			r := httptest.NewRequest(method, "/", nil)
			r.RequestURI = HTTPPath + path // as sent: httptest would refuse some of these targets
			if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
				r.URL = u
			}
			r.Header.Set(fencewire.HeaderRouteKey, tpl)
			r.Header.Set(fencewire.HeaderToken, fence)
			return serve(r)
		},
		"http-nginx": func(t *testing.T, method, path, tpl, fence string) (int, string) {
			r := httptest.NewRequest("GET", HTTPPath, nil)
			r.Header.Set("X-Original-Method", method)
			r.Header.Set("X-Original-URI", path)
			r.Header.Set(fencewire.HeaderRouteKey, tpl)
			r.Header.Set(fencewire.HeaderToken, fence)
			r.Header.Set(fencewire.HeaderAuthRequest, "nginx")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code == http.StatusForbidden { // the nginx mapping: the real status is in a header
				code, _ := strconv.Atoi(w.Header().Get(fencewire.HeaderStatus))
				return code, w.Header().Get(fencewire.HeaderReason)
			}
			return w.Code, w.Header().Get(fencewire.HeaderReason)
		},
		"http-forwarded": func(t *testing.T, method, path, tpl, fence string) (int, string) {
			r := httptest.NewRequest("GET", HTTPPath+"?"+url.Values{fencewire.ExtKey: {tpl}}.Encode(), nil)
			r.Header.Set("X-Forwarded-Method", method)
			r.Header.Set("X-Forwarded-Uri", path)
			r.Header.Set(fencewire.HeaderToken, fence)
			return serve(r)
		},
	}
}

// TestEdgeKeyTemplateCanonical is issue #11 item 2 on every edge: while
// one client holds orders/42, another acquires the lock its spelling of
// order 42 expanded to before (orders/42;x, orders/+42, orders/４２) and
// writes with that lock's current fence. Each such write is refused 400
// "malformed" without a backend read, on gRPC and on forward-auth alike,
// while the canonical spellings still pass.
func TestEdgeKeyTemplateCanonical(t *testing.T) {
	bs := locktest.OpenBolt(t, locktest.FloorOff)
	s := &countingStore{Store: bs}
	holder := locktest.Acquire(t, s, "orders/42", time.Minute)
	c := fencecheck.New(s, fencecheck.Options{Logger: quiet})

	tests := []struct {
		tpl, path string
		splitKey  string // the key the path named before; "" when it is canonical
	}{
		{"orders/{2}", "/orders/42;x", "orders/42;x"},
		{"orders/{2}", "/orders/%2B42", "orders/+42"},
		{"orders/{2}", "/orders/%EF%BC%94%EF%BC%92", "orders/４２"},
		{"orders/{2}", "/orders/４２", "orders/４２"},
		{"orders/{2}", "/orders/%34%32", "orders/42"}, // the same lock, but not the upstream's spelling
		{"orders/{2:int}", "/orders/042", "orders/042"},
		{"orders/{2:int}", "/orders/+42", "orders/+42"},
		{"orders/{2}", "/orders/42", ""},
		{"orders/{2:int}", "/orders/42", ""},
		{"orders/{2:int}", "/orders/42?v=;1", ""},
	}
	// Other clients hold the locks the other spellings used to name.
	held := map[string]string{"orders/42": holder.Fence}
	for _, tc := range tests {
		if _, ok := held[tc.splitKey]; !ok && tc.splitKey != "" {
			held[tc.splitKey] = locktest.Acquire(t, s, tc.splitKey, time.Minute).Fence
		}
	}
	for name, check := range edges(t, c) {
		t.Run(name, func(t *testing.T) {
			for _, tc := range tests {
				fence := holder.Fence
				if tc.splitKey != "" {
					fence = held[tc.splitKey]
				}
				before := s.inspects.Load()
				code, reason := check(t, "PUT", tc.path, tc.tpl, fence)
				reads := s.inspects.Load() - before
				if tc.splitKey == "" {
					if code != 200 {
						t.Errorf("%s under %s: %d %q, want 200", tc.path, tc.tpl, code, reason)
					}
					continue
				}
				if code != 400 || reason != string(fencecheck.ReasonMalformed) || reads != 0 {
					t.Errorf("%s under %s: %d %q after %d backend reads, want 400 malformed and none",
						tc.path, tc.tpl, code, reason, reads)
				}
				// Without a fence it is the same 400: the path is refused
				// before anything else is read.
				if code, reason := check(t, "PUT", tc.path, tc.tpl, ""); code != 400 || reason != string(fencecheck.ReasonMalformed) {
					t.Errorf("%s under %s without a fence: %d %q, want 400 malformed", tc.path, tc.tpl, code, reason)
				}
			}
		})
	}
}

// TestEdgeFenceMethodsInvalid is issue #11 item 8 on every edge: a route
// whose fence_methods names a non-standard method without the "+" opt-in
// fails closed (503 unavailable) for every method, even a fenceless
// read, rather than silently leaving PUT unchecked; "+PROPFIND" is a write
// method by opt-in.
func TestEdgeFenceMethodsInvalid(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	holder := locktest.Acquire(t, s, "orders/42", time.Minute)
	c := fencecheck.New(s, fencecheck.Options{Logger: quiet})
	h := NewHTTPHandler(c, Options{})
	client := authv3.NewAuthorizationClient(serveGRPC(t, c))

	check := func(t *testing.T, grpc bool, method, methods, fence string) (int, string) {
		if grpc {
			resp, err := client.Check(t.Context(), envoyRequest(method, "/orders/42",
				map[string]string{fencewire.HeaderToken: fence}, map[string]string{fencewire.ExtKey: "orders/{2}", fencewire.ExtMethods: methods}))
			if err != nil {
				t.Fatal(err)
			}
			if d := resp.GetDeniedResponse(); d != nil {
				return int(d.GetStatus().GetCode()), headerMap(d.GetHeaders())[fencewire.HeaderReason]
			}
			return 200, ""
		}
		r := httptest.NewRequest("GET", HTTPPath+"?"+url.Values{fencewire.ExtKey: {"orders/{2}"}, fencewire.ExtMethods: {methods}}.Encode(), nil)
		r.Header.Set("X-Forwarded-Method", method)
		r.Header.Set("X-Forwarded-Uri", "/orders/42")
		r.Header.Set(fencewire.HeaderToken, fence)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Header().Get(fencewire.HeaderReason)
	}
	// A dry-run route fails closed too: which requests it was meant to
	// observe is exactly what cannot be read.
	resp, err := client.Check(t.Context(), envoyRequest("PUT", "/orders/42", nil,
		map[string]string{fencewire.ExtKey: "orders/{2}", fencewire.ExtMethods: "PUTT", fencewire.ExtMode: "dry-run"}))
	if err != nil || int(resp.GetDeniedResponse().GetStatus().GetCode()) != 503 {
		t.Errorf("dry-run route with fence_methods PUTT: %v %v, want 503", resp, err)
	}
	for _, grpc := range []bool{true, false} {
		for _, methods := range []string{"bogus method!", "PUTT", "POST,PUTT", "PROPFIND"} {
			for _, m := range []string{"PUT", "GET", "PUTT", "PROPFIND"} {
				if code, reason := check(t, grpc, m, methods, ""); code != 503 || reason != string(fencecheck.ReasonUnavailable) {
					t.Errorf("grpc=%v fence_methods %q, fenceless %s: %d %q, want 503 unavailable", grpc, methods, m, code, reason)
				}
			}
		}
		for _, tc := range []struct {
			method, fence string
			want          int
		}{
			{"PROPFIND", "", 428},
			{"PROPFIND", holder.Fence, 200},
			{"PUT", "", 428},
			{"GET", "", 200},
			{"MKCOL", "", 200},
		} {
			if code, reason := check(t, grpc, tc.method, "PUT,+PROPFIND", tc.fence); code != tc.want {
				t.Errorf("grpc=%v fence_methods PUT,+PROPFIND: %s: %d %q, want %d", grpc, tc.method, code, reason, tc.want)
			}
		}
	}
}
