package fenceguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fenceguard"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/writeproof"
)

// keyServer stands in for a gateway's GET /v1/proof/keys: it serves the
// current signer's key set, or fails, and counts requests.
type keyServer struct {
	mu      sync.Mutex
	signer  *writeproof.Signer
	failing bool
	fetches atomic.Int64
}

func (s *keyServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.fetches.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.signer.Verifier().KeySet())
}

func (s *keyServer) set(sg *writeproof.Signer, failing bool) {
	s.mu.Lock()
	s.signer, s.failing = sg, failing
	s.mu.Unlock()
}

func rotationSigner(t *testing.T, keys ...writeproof.Key) *writeproof.Signer {
	t.Helper()
	s, err := writeproof.NewSigner(keys)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKeySetRotation walks a key rotation at the gateway and checks what
// the API's KeySet verifies at each step, and how often it fetches.
func TestKeySetRotation(t *testing.T) {
	if err := rotationWalk(t, fenceguard.KeySetOptions{MaxAge: time.Minute, MinRefresh: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
}

// TestKeySetRotationCatchesBrokenCaches: the walk fails for a cache that
// never expires (a removed key would verify forever) and for one that
// fetches whenever asked (made-up key ids would hammer the gateway).
func TestKeySetRotationCatchesBrokenCaches(t *testing.T) {
	for name, o := range map[string]fenceguard.KeySetOptions{
		"keys never expire":   {MaxAge: 1000 * time.Hour, MinRefresh: 5 * time.Second},
		"fetches not paced":   {MaxAge: time.Minute, MinRefresh: time.Nanosecond},
		"no refetch on a kid": {MaxAge: time.Minute, MinRefresh: time.Hour},
	} {
		if err := rotationWalk(t, o); err == nil {
			t.Errorf("broken key cache %q passed the rotation walk", name)
		}
	}
}

// rotationWalk is the walk; it returns the first step that went wrong.
func rotationWalk(t *testing.T, o fenceguard.KeySetOptions) error {
	old := writeproof.Key{KID: "2026-10", Seed: seed(1)}
	next := writeproof.Key{KID: "2026-11", Seed: seed(2)}
	srv := &keyServer{}
	srv.set(rotationSigner(t, old), false)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	clk := testutil.NewClock(time.Unix(1_800_000_000, 0))
	ks := fenceguard.NewKeySet(ts.URL, o)
	fenceguard.SetClock(ks, clk.Now)
	ctx := context.Background()
	verify := func(s *writeproof.Signer) error {
		_, err := ks.Verify(ctx, sign(t, s, "orders/42", f7), "orders/42", f7)
		return err
	}
	oldOnly := rotationSigner(t, old)
	nextOnly := rotationSigner(t, next)

	// First use fetches; further verifications use the cache.
	for range 5 {
		if err := verify(oldOnly); err != nil {
			return err
		}
	}
	if n := srv.fetches.Load(); n != 1 {
		return fmt.Errorf("%d fetches for 5 verifications, want 1 (cached)", n)
	}
	// Step 1 and 2 at once: the gateway lists the new key and signs with
	// it. A proof under the new kid makes the KeySet fetch at once.
	srv.set(rotationSigner(t, next, old), false)
	clk.Advance(6 * time.Second)
	if err := verify(nextOnly); err != nil {
		return fmt.Errorf("a proof signed by the rotated-in key: %v", err)
	}
	if err := verify(oldOnly); err != nil {
		return fmt.Errorf("a proof signed by the old key, still listed: %v", err)
	}
	if n := srv.fetches.Load(); n != 2 {
		return fmt.Errorf("%d fetches, want 2", n)
	}
	// Made-up key ids cannot make it hammer the gateway: within
	// MinRefresh, at most one fetch whatever arrives.
	clk.Advance(6 * time.Second)
	for i := range 50 {
		clk.Advance(time.Millisecond) // a stream of them, 50 ms in all
		s := rotationSigner(t, writeproof.Key{KID: "bogus" + string(rune('a'+i%26)), Seed: seed(3)})
		if err := verify(s); !errors.Is(err, writeproof.ErrUnknownKey) {
			return fmt.Errorf("proof under an unknown kid: %v, want ErrUnknownKey", err)
		}
	}
	if n := srv.fetches.Load(); n != 3 {
		return fmt.Errorf("%d fetches after 50 proofs under unknown key ids, want 3", n)
	}
	// Step 3: the gateway drops the old key. Once the cache is older than
	// MaxAge, proofs signed by it no longer verify.
	srv.set(nextOnly, false)
	if err := verify(oldOnly); err != nil {
		return fmt.Errorf("within MaxAge the dropped key still verifies: %v", err)
	}
	clk.Advance(time.Minute)
	if err := verify(oldOnly); !errors.Is(err, writeproof.ErrUnknownKey) {
		return fmt.Errorf("past MaxAge, a proof signed by the dropped key: %v, want ErrUnknownKey", err)
	}
	// The gateway is down: the keys fetched go on verifying.
	srv.set(nextOnly, true)
	clk.Advance(2 * time.Minute)
	if err := verify(nextOnly); err != nil {
		return fmt.Errorf("gateway down, cached keys: %v", err)
	}
	return nil
}

// TestKeySetUnavailable: with no key set fetched yet, verification fails
// with ErrKeysUnavailable, which the guard answers 503, never 403; fetches
// stay paced; once the gateway answers, the keys are used.
func TestKeySetUnavailable(t *testing.T) {
	gw := signer(t, "k1", 1)
	srv := &keyServer{}
	srv.set(gw, true)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	clk := testutil.NewClock(time.Unix(1_800_000_000, 0))
	ks := fenceguard.NewKeySet(ts.URL, fenceguard.KeySetOptions{})
	fenceguard.SetClock(ks, clk.Now)
	g := fenceguard.New(fenceguard.Options{Key: orderKey, Proofs: ks})
	hdr := http.Header{}
	hdr.Set("x-fence-verified", f7)
	hdr.Set("x-fence-proof", sign(t, gw, "orders/42", f7))
	for range 20 {
		w, _, ran := serve(g, "/orders/42", hdr)
		if ran || w.Code != http.StatusServiceUnavailable || w.Header().Get("x-fence-reason") != "unavailable" {
			t.Fatalf("no keys: %d %s (ran %v), want 503 unavailable", w.Code, w.Body, ran)
		}
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for 20 requests within a second, want 1", n)
	}
	srv.set(gw, false)
	clk.Advance(1500 * time.Millisecond)
	if w, _, ran := serve(g, "/orders/42", hdr); !ran {
		t.Fatalf("keys back: %d %s", w.Code, w.Body)
	}
	// A key set the gateway serves broken is not trusted.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"keys":[{"kty":"RSA","kid":"k1","n":"x","e":"AQAB"}]}`))
	}))
	defer bad.Close()
	ks2 := fenceguard.NewKeySet(bad.URL, fenceguard.KeySetOptions{})
	if _, err := ks2.Verify(context.Background(), hdr.Get("x-fence-proof"), "orders/42", f7); !errors.Is(err, fenceguard.ErrKeysUnavailable) {
		t.Fatalf("an RSA key set: %v, want ErrKeysUnavailable", err)
	}
}
