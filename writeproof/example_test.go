package writeproof_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/writeproof"
)

// README:begin

var errStale = errors.New("a newer fence already wrote")

// verifyWrite is what an API behind fencegate can add to its own conditional
// write: the proof must be genuine (signed by one of the gateway's keys) and
// for this key and this fence, and the fence must not be older than the one
// stored with the data.
func verifyWrite(gateway string, r *http.Request, key string, stored *string) error {
	resp, err := http.Get(gateway + "/v1/proof/keys") // cache it; fetch again on ErrUnknownKey
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	keys, err := writeproof.ReadKeySet(resp.Body)
	if err != nil {
		return err
	}
	fence := r.Header.Get("X-Fence-Token")
	if _, err := keys.Verify(r.Header.Get("X-Fence-Proof"), key, fence); err != nil {
		return err // answer 403
	}
	// Fences are 15 digits: string order is numeric order. In SQL:
	// UPDATE orders SET ..., fence = $1 WHERE id = $2 AND fence <= $1
	if fence < *stored {
		return errStale // answer 409
	}
	*stored = fence
	return nil
}

// README:end

// Example_offlineVerification runs the README's verifyWrite against a
// stand-in gateway that publishes its key set as fencegate does.
func Example_offlineVerification() {
	signer, _ := writeproof.NewSigner([]writeproof.Key{{KID: "2026-11", Seed: bytes.Repeat([]byte{1}, ed25519.SeedSize)}})
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(signer.Verifier().KeySet())
	}))
	defer gateway.Close()
	forger, _ := writeproof.NewSigner([]writeproof.Key{{KID: "2026-11", Seed: bytes.Repeat([]byte{2}, ed25519.SeedSize)}})

	write := func(fence string, s *writeproof.Signer, key string) *http.Request {
		proof, _ := s.Sign(key, fence, "p8s1m66P1k_mBCcoO-Qe2Q")
		r := httptest.NewRequest("PUT", "/orders/42", nil)
		r.Header.Set("X-Fence-Token", fence)
		r.Header.Set("X-Fence-Proof", proof)
		return r
	}
	stored := "000000000000000"
	for _, w := range []struct {
		name string
		r    *http.Request
	}{
		{"holder of fence 7", write("000000000000007", signer, "orders/42")},
		{"holder of fence 6, late", write("000000000000006", signer, "orders/42")},
		{"forged proof", write("000000000000008", forger, "orders/42")},
		{"proof for orders/43", write("000000000000009", signer, "orders/43")},
	} {
		err := verifyWrite(gateway.URL, w.r, "orders/42", &stored)
		fmt.Printf("%s: %v (stored fence %s)\n", w.name, err, stored)
	}
	// Output:
	// holder of fence 7: <nil> (stored fence 000000000000007)
	// holder of fence 6, late: a newer fence already wrote (stored fence 000000000000007)
	// forged proof: writeproof: bad signature (stored fence 000000000000007)
	// proof for orders/43: writeproof: proof is for another key (stored fence 000000000000007)
}

// TestREADMEExampleIsTheExample: the README's offline-verification snippet
// is this file's verifyWrite, character for character, so the README shows
// code that compiles and that Example_offlineVerification runs.
func TestREADMEExampleIsTheExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "// README:"+"begin\n")
	want, _, ok := strings.Cut(rest, "// README:"+"end\n")
	if !ok {
		t.Fatal("example_test.go has no README region")
	}
	readme, err := os.ReadFile("../docs/proofs.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok = strings.Cut(string(readme), "<!-- writeproof/example_test.go -->\n```go\n")
	got, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("docs/proofs.md has no block marked <!-- writeproof/example_test.go -->")
	}
	if strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Fatalf("docs/proofs.md's offline-verification example differs from writeproof/example_test.go:\n--- docs/proofs.md\n%s\n--- example\n%s", got, want)
	}
}
