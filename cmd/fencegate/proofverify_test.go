package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/writeproof"
)

// TestProofVerifierFromPublicKeys: a proxy configured with proof.verifyKeys
// alone (no seed that could mint proofs) verifies the gateway's proofs, and
// refuses one signed by a key it does not list.
func TestProofVerifierFromPublicKeys(t *testing.T) {
	seed := writeproof.GenerateSeed()
	signer, err := writeproof.NewSigner([]writeproof.Key{{KID: "k1", Seed: seed}})
	if err != nil {
		t.Fatal(err)
	}
	pub := base64.RawURLEncoding.EncodeToString(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
	v, err := proofVerifier(config.Proof{VerifyKeys: []config.ProofVerifyKey{{KID: "k1", PublicKey: pub}}})
	if err != nil || v == nil {
		t.Fatalf("proofVerifier: %v %v", v, err)
	}
	proof, err := signer.Sign("orders/42", "000000000000007", "p8s1m66P1k_mBCcoO-Qe2Q")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(proof, "orders/42", "000000000000007"); err != nil {
		t.Fatalf("a proof of the listed key: %v", err)
	}
	other, _ := writeproof.NewSigner([]writeproof.Key{{KID: "k2", Seed: writeproof.GenerateSeed()}})
	forged, _ := other.Sign("orders/42", "000000000000007", "p8s1m66P1k_mBCcoO-Qe2Q")
	if _, err := v.Verify(forged, "orders/42", "000000000000007"); !errors.Is(err, writeproof.ErrUnknownKey) {
		t.Fatalf("a proof of an unlisted key: %v, want ErrUnknownKey", err)
	}
	if v, err := proofVerifier(config.Proof{}); v != nil || err != nil {
		t.Fatalf("no keys: %v %v, want nil, nil (signed routes fail closed)", v, err)
	}
	c := config.Default()
	c.Proof.VerifyKeys = []config.ProofVerifyKey{{KID: "k1", PublicKey: "not-a-key"}, {KID: "k1", PublicKey: pub}}
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), "proof.verifyKeys[0]: not a 32-byte") || !strings.Contains(err.Error(), `proof.verifyKeys[1].kid: "k1" is listed twice`) {
		t.Fatalf("a bad public key and a kid listed twice: %v", err)
	}
}
