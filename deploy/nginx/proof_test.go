package nginx

import (
	"bytes"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/deploy/nginx/nginxtest"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/writeproof"
)

// TestNginxSignedRoute: the shipped config's /payments/ location requires a
// signed write proof. The current fence alone is refused 403 bad-proof
// before it reaches the app; with the holder's proof the write passes and
// the app receives the proof (to verify it itself) and x-fence-verified.
func TestNginxSignedRoute(t *testing.T) {
	store := locktest.OpenBolt(t, locktest.FloorOff)
	sg, err := writeproof.NewSigner([]writeproof.Key{{KID: "k1", Seed: bytes.Repeat([]byte{1}, ed25519.SeedSize)}})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := store.Acquire(t.Context(), "payments/7", time.Minute)
	if err != nil || !cur.OK {
		t.Fatalf("acquire: %+v %v", cur, err)
	}
	proof, err := sg.Sign("payments/7", cur.Fence, cur.LockID)
	if err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	h := authz.NewHTTPHandler(fencecheck.New(store, fencecheck.Options{Proofs: sg.Verifier()}), authz.Options{})
	mux.Handle(authz.HTTPPath, h)
	mux.Handle(authz.HTTPPath+"/", h)
	fg := httptest.NewServer(mux)
	t.Cleanup(fg.Close)
	up := &app{}
	appSrv := httptest.NewServer(up)
	t.Cleanup(appSrv.Close)
	base := nginxtest.Start(t, fg.Listener.Addr().String(), appSrv.Listener.Addr().String())

	// A client cannot lower the route's proof mode with a header.
	resp, body := do(t, base, call{"PUT", "/payments/7", map[string]string{"X-Fence-Token": cur.Fence, "X-Fence-Route-Proof": "none"}})
	if resp.StatusCode != 403 || resp.Header.Get("X-Fence-Reason") != "bad-proof" || up.count() != 0 {
		t.Fatalf("replayed fence: %d %q %s (app reached %d times)", resp.StatusCode, resp.Header.Get("X-Fence-Reason"), body, up.count())
	}
	resp, body = do(t, base, call{"PUT", "/payments/7", map[string]string{"X-Fence-Token": cur.Fence, "X-Fence-Proof": proof}})
	if resp.StatusCode != 200 || resp.Header.Get("X-App") != "reached" {
		t.Fatalf("holder's proof: %d %s", resp.StatusCode, body)
	}
	if seen := up.last(); seen.Get("X-Fence-Proof") != proof || seen.Get("X-Fence-Verified") != cur.Fence {
		t.Fatalf("app saw proof %q verified %q", seen.Get("X-Fence-Proof"), seen.Get("X-Fence-Verified"))
	}
}
