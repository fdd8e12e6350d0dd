package authz

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/writeproof"
)

func testSigner(t *testing.T) *writeproof.Signer {
	t.Helper()
	s, err := writeproof.NewSigner([]writeproof.Key{{KID: "k1", Seed: bytes.Repeat([]byte{7}, ed25519.SeedSize)}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestProofRouteBothTransports: on a fence_proof=signed route, the current
// fence alone (what any denial body tells anyone) is refused 403
// bad-proof on gRPC ext_authz and HTTP forward-auth alike; the holder's
// proof passes; a proof for another key does not.
func TestProofRouteBothTransports(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	sg := testSigner(t)
	cur := locktest.Acquire(t, s, "orders/7", time.Minute)
	other := locktest.Acquire(t, s, "orders/8", time.Minute)
	proof, _ := sg.Sign("orders/7", cur.Fence, cur.LockID)
	proof8, _ := sg.Sign("orders/8", other.Fence, other.LockID)
	checker := fencecheck.New(s, fencecheck.Options{Proofs: sg.Verifier()})

	conn := serveGRPC(t, checker)
	az := authv3.NewAuthorizationClient(conn)
	srv := httptest.NewServer(NewHTTPHandler(checker, Options{}))
	defer srv.Close()

	tests := []struct {
		name   string
		hdr    map[string]string
		status int
		reason string
	}{
		{"replayed fence, no proof", map[string]string{fencewire.HeaderToken: cur.Fence}, 403, "bad-proof"},
		{"holder's proof", map[string]string{fencewire.HeaderToken: cur.Fence, fencewire.HeaderProof: proof}, 200, ""},
		{"proof for another key", map[string]string{fencewire.HeaderToken: other.Fence, fencewire.HeaderProof: proof8}, 403, "bad-proof"},
		{"proof with a made-up fence", map[string]string{fencewire.HeaderToken: "000000000000099", fencewire.HeaderProof: proof}, 403, "bad-proof"},
	}
	for _, tc := range tests {
		t.Run("grpc/"+tc.name, func(t *testing.T) {
			resp, err := az.Check(t.Context(), envoyRequest("PUT", "/orders/7", tc.hdr, map[string]string{fencewire.ExtKey: "orders/{2}", fencewire.ExtProof: "signed"}))
			if err != nil {
				t.Fatal(err)
			}
			got := 200
			if d := resp.GetDeniedResponse(); d != nil {
				got = int(d.GetStatus().GetCode())
			}
			if got != tc.status {
				t.Fatalf("status %d, want %d (%v)", got, tc.status, resp)
			}
		})
		t.Run("http/"+tc.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", srv.URL+HTTPPath+"?fence_key=orders/{2}&fence_proof=signed", nil)
			r.Header.Set("X-Forwarded-Method", "PUT")
			r.Header.Set("X-Forwarded-Uri", "/orders/7")
			// A client-sent route header cannot lower the route's proof
			// mode: with X-Forwarded-* only the query counts.
			r.Header.Set(fencewire.HeaderRouteProof, "none")
			for k, v := range tc.hdr {
				r.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get(fencewire.HeaderReason) != tc.reason {
				t.Fatalf("status %d reason %q, want %d %q", resp.StatusCode, resp.Header.Get(fencewire.HeaderReason), tc.status, tc.reason)
			}
			if tc.status == 200 && resp.Header.Get(fencewire.HeaderVerified) != cur.Fence {
				t.Fatalf("x-fence-verified = %q", resp.Header.Get(fencewire.HeaderVerified))
			}
		})
	}

	// The proof header sent twice is ambiguous.
	r, _ := http.NewRequest("PUT", srv.URL+HTTPPath+"/orders/7", nil)
	r.Header.Set(fencewire.HeaderRouteKey, "orders/{2}")
	r.Header.Set(fencewire.HeaderRouteProof, "signed")
	r.Header.Set(fencewire.HeaderToken, cur.Fence)
	r.Header.Add(fencewire.HeaderProof, proof)
	r.Header.Add(fencewire.HeaderProof, proof)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("two proof headers: %d, want 400", resp.StatusCode)
	}
}

// TestHideCurrentFence: with HideCurrentFence, a denial names no current
// fence; without it, it does (the test proves it can see the difference).
func TestHideCurrentFence(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	cur := locktest.Acquire(t, s, "orders/7", time.Minute)
	for _, hide := range []bool{false, true} {
		srv := httptest.NewServer(NewHTTPHandler(fencecheck.New(s, fencecheck.Options{HideCurrentFence: hide}), Options{}))
		r, _ := http.NewRequest("PUT", srv.URL+HTTPPath+"/orders/7", nil)
		r.Header.Set(fencewire.HeaderKey, "orders/7")
		r.Header.Set(fencewire.HeaderToken, "000000000000000")
		r.Header.Set(fencewire.HeaderAuthRequest, "nginx")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		srv.Close()
		var body denialBody
		if err := json.Unmarshal(b, &body); err != nil || body.Error != "stale" {
			t.Fatalf("body %s: %v", b, err)
		}
		leaks := bytes.Contains(b, []byte(cur.Fence)) || bytes.Contains([]byte(resp.Header.Get(fencewire.HeaderBody)), []byte(cur.Fence))
		if leaks == hide {
			t.Fatalf("hide=%v: body %s, header %s", hide, b, resp.Header.Get(fencewire.HeaderBody))
		}
	}
	// An allowed write is still verified with the fence hidden.
	srv := httptest.NewServer(NewHTTPHandler(fencecheck.New(s, fencecheck.Options{HideCurrentFence: true}), Options{}))
	defer srv.Close()
	r, _ := http.NewRequest("PUT", srv.URL+HTTPPath+"/orders/7", nil)
	r.Header.Set(fencewire.HeaderKey, "orders/7")
	r.Header.Set(fencewire.HeaderToken, cur.Fence)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(fencewire.HeaderVerified) != cur.Fence {
		t.Fatalf("allowed write: %d %q", resp.StatusCode, resp.Header.Get(fencewire.HeaderVerified))
	}
}
