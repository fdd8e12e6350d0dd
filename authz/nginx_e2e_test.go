package authz_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/deploy/nginx/nginxtest"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// TestNginxNonCanonicalPaths runs the shipped nginx config (real nginx) in
// front of the forward-auth handler. nginx routes on the normalised $uri
// but sends the raw $request_uri as X-Original-URI, so "//orders/42" reaches
// the app as /orders/42 while its segment 2 is "orders". A client holding a
// lock on the key the raw path spells ("orders/orders", "orders/x") must not
// write /orders/42 with it: such paths are 400 malformed.
func TestNginxNonCanonicalPaths(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	h := authz.NewHTTPHandler(fencecheck.New(s, fencecheck.Options{}), authz.Options{})
	mux := http.NewServeMux()
	mux.Handle(authz.HTTPPath, h)
	mux.Handle(authz.HTTPPath+"/", h)
	fg := httptest.NewServer(mux)
	t.Cleanup(fg.Close)
	var reached atomic.Int32
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
	}))
	t.Cleanup(app.Close)
	base := nginxtest.Start(t, fg.Listener.Addr().String(), app.Listener.Addr().String())

	for _, tc := range []struct{ path, heldKey string }{
		{"//orders/42", "orders/orders"},
		{"/orders/x/../42", "orders/x"},
		{"/orders/%2e%2e/orders/42", "orders/.."},
	} {
		r, err := s.Acquire(t.Context(), tc.heldKey, time.Minute)
		if err != nil || !r.OK {
			t.Fatalf("acquire %q: %+v %v", tc.heldKey, r, err)
		}
		req, err := http.NewRequest("PUT", base+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(fencewire.HeaderToken, r.Fence)
		before := reached.Load()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(fencewire.HeaderReason) != "malformed" {
			t.Errorf("PUT %s with the fence of %q: %d %q, want 400 malformed", tc.path, tc.heldKey,
				resp.StatusCode, resp.Header.Get(fencewire.HeaderReason))
		}
		if reached.Load() != before {
			t.Errorf("PUT %s reached the app", tc.path)
		}
	}
}
