package client_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/wire"
	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/writeproof"
)

// TestProofThroughClient: a gateway with proof keys answers each acquire,
// over either client, with a proof that the published keys verify for that
// key and fence; Lock hands it to the function in Held, and the Transport
// sends it.
func TestProofThroughClient(t *testing.T) {
	sg, err := writeproof.NewSigner([]writeproof.Key{{KID: "k1", Seed: bytes.Repeat([]byte{1}, ed25519.SeedSize)}})
	if err != nil {
		t.Fatal(err)
	}
	g := gatewayWith(t, gatewayConfig{proofs: sg})

	// The keys, as an offline verifier fetches them.
	resp, err := http.Get(g.httpURL + wire.PathProofKeys)
	if err != nil {
		t.Fatal(err)
	}
	v, err := writeproof.ReadKeySet(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Public keys may be cached briefly (and were once overwritten with
	// no-store by the reply writer).
	if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=300" {
		t.Errorf("keys' Cache-Control = %q, want public, max-age=300", cc)
	}

	forEachKind(t, func(t *testing.T, k kind) {
		c := k.client(t, k.addr(g), token)
		key := "orders/9-" + k.name
		r, err := c.Acquire(t.Context(), key, 5*time.Second)
		if err != nil || !r.OK || r.Proof == "" {
			t.Fatalf("acquire: %+v %v", r, err)
		}
		if _, err := v.Verify(r.Proof, key, r.Fence); err != nil {
			t.Fatalf("acquire's proof: %v", err)
		}
		if _, err := c.Release(t.Context(), r.LockID); err != nil {
			t.Fatal(err)
		}

		rt := &recordingRT{}
		edge := &http.Client{Transport: client.NewTransport(rt)}
		err = c.Lock(t.Context(), key, func(ctx context.Context, h lock.Held) error {
			if _, err := v.Verify(h.Proof, key, h.Fence); err != nil {
				t.Errorf("Held.Proof: %v", err)
			}
			req, _ := http.NewRequestWithContext(client.WithFence(ctx, h), http.MethodPut, "http://edge/orders/9", nil)
			resp, err := edge.Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			rt.mu.Lock()
			defer rt.mu.Unlock()
			if got := rt.seen[len(rt.seen)-1].Get(client.HeaderProof); got != h.Proof {
				t.Errorf("x-fence-proof sent %q, want the Held's proof", got)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestNoProofKeys: without keys, acquires carry no proof and the keys
// endpoint says so with 404.
func TestNoProofKeys(t *testing.T) {
	g := gateway(t)
	resp, err := http.Get(g.httpURL + wire.PathProofKeys)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("keys without proof keys: %d", resp.StatusCode)
	}
	forEachKind(t, func(t *testing.T, k kind) {
		r, err := k.client(t, k.addr(g), token).Acquire(t.Context(), "orders/10-"+k.name, time.Second)
		if err != nil || r.Proof != "" {
			t.Fatalf("acquire: %+v %v", r, err)
		}
	})
}
