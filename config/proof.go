package config

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/fencegate/fencegate/writeproof"
)

// Proof configures signed write proofs (package writeproof): with keys, the
// gateway answers every acquire with a proof, routes with
// fence_proof=signed require one, and GET /v1/proof/keys publishes the
// public keys.
type Proof struct {
	// Keys: the first signs, every one verifies. Rotate by adding the new
	// key second, then moving it first, then removing the old one.
	Keys []ProofKey `yaml:"keys"`
	// VerifyKeys are public keys that only verify: what a `fencegate
	// proxy` sidecar needs, so that it never holds a seed that could mint
	// proofs. serve signs with Keys; both verify with Keys and VerifyKeys.
	VerifyKeys []ProofVerifyKey `yaml:"verifyKeys"`
}

// ProofVerifyKey is one Ed25519 public key (32 bytes, base64url, as
// `fencegate proofkey` prints it and /v1/proof/keys serves it as "x").
type ProofVerifyKey struct {
	KID           string `yaml:"kid"`
	PublicKeyFile string `yaml:"publicKeyFile"`
	PublicKey     string `yaml:"publicKey"`
}

// ProofKey is one Ed25519 signing key: its id and its 32-byte seed, in a
// file (preferred: a Secret volume) or inline, base64 either way
// (`fencegate proofkey` prints one).
type ProofKey struct {
	KID            string `yaml:"kid"`
	PrivateKeyFile string `yaml:"privateKeyFile"`
	PrivateKey     string `yaml:"privateKey"`
}

// Enabled reports whether signing keys are configured.
func (p Proof) Enabled() bool { return len(p.Keys) > 0 }

// LoadVerifyKeys reads the verify-only public keys.
func (p Proof) LoadVerifyKeys() (map[string]ed25519.PublicKey, error) {
	out := make(map[string]ed25519.PublicKey, len(p.VerifyKeys))
	for i, k := range p.VerifyKeys {
		pub, err := k.public()
		if err != nil {
			return nil, fmt.Errorf("proof.verifyKeys[%d] (%s): %w", i, k.KID, err)
		}
		out[k.KID] = pub
	}
	return out, nil
}

func (k ProofVerifyKey) public() (ed25519.PublicKey, error) {
	var s string
	switch {
	case k.PublicKeyFile != "" && k.PublicKey != "":
		return nil, fmt.Errorf("give publicKeyFile or publicKey, not both")
	case k.PublicKeyFile != "":
		b, err := os.ReadFile(k.PublicKeyFile)
		if err != nil {
			return nil, err
		}
		s = string(b)
	case k.PublicKey != "":
		s = k.PublicKey
	default:
		return nil, fmt.Errorf("publicKeyFile or publicKey is required")
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("not a %d-byte Ed25519 public key in unpadded base64url", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// LoadKeys reads the configured keys' seeds.
func (p Proof) LoadKeys() ([]writeproof.Key, error) {
	keys := make([]writeproof.Key, 0, len(p.Keys))
	for i, k := range p.Keys {
		seed, err := k.seed()
		if err != nil {
			return nil, fmt.Errorf("proof.keys[%d] (%s): %w", i, k.KID, err)
		}
		keys = append(keys, writeproof.Key{KID: k.KID, Seed: seed})
	}
	return keys, nil
}

func (k ProofKey) seed() ([]byte, error) {
	switch {
	case k.PrivateKeyFile != "" && k.PrivateKey != "":
		return nil, fmt.Errorf("give privateKeyFile or privateKey, not both")
	case k.PrivateKeyFile != "":
		b, err := os.ReadFile(k.PrivateKeyFile)
		if err != nil {
			return nil, err
		}
		return writeproof.ParseSeed(string(b))
	case k.PrivateKey != "":
		return writeproof.ParseSeed(k.PrivateKey)
	}
	return nil, fmt.Errorf("privateKeyFile or privateKey is required")
}

// validateProof adds every problem of the proof settings (a seed file that
// does not read counts: the gateway would not start with it).
func (c *Config) validateProof(add func(string, ...any)) {
	kids := map[string]bool{} // one kid space: signing and verify-only keys
	checkKID := func(where, kid string) {
		switch {
		case !writeproof.ValidKID(kid):
			add("%s.kid: %q must be 1 to 32 characters of [A-Za-z0-9_-]", where, kid)
		case kids[kid]:
			add("%s.kid: %q is listed twice", where, kid)
		}
		kids[kid] = true
	}
	for i, k := range c.Proof.Keys {
		where := fmt.Sprintf("proof.keys[%d]", i)
		checkKID(where, k.KID)
		if _, err := k.seed(); err != nil {
			add("%s: %v (a 32-byte Ed25519 seed in base64; see `fencegate proofkey`)", where, err)
		}
	}
	for i, k := range c.Proof.VerifyKeys {
		where := fmt.Sprintf("proof.verifyKeys[%d]", i)
		checkKID(where, k.KID)
		if _, err := k.public(); err != nil {
			add("%s: %v (see `fencegate proofkey`)", where, err)
		}
	}
}
