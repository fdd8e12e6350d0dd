package config

import (
	"fmt"
	"os"

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
}

// ProofKey is one Ed25519 signing key: its id and its 32-byte seed, in a
// file (preferred: a Secret volume) or inline, base64 either way
// (`fencegate proofkey` prints one).
type ProofKey struct {
	KID            string `yaml:"kid"`
	PrivateKeyFile string `yaml:"privateKeyFile"`
	PrivateKey     string `yaml:"privateKey"`
}

// Enabled reports whether proof keys are configured.
func (p Proof) Enabled() bool { return len(p.Keys) > 0 }

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
	kids := map[string]bool{}
	for i, k := range c.Proof.Keys {
		where := fmt.Sprintf("proof.keys[%d]", i)
		switch {
		case !writeproof.ValidKID(k.KID):
			add("%s.kid: %q must be 1 to 32 characters of [A-Za-z0-9_-]", where, k.KID)
		case kids[k.KID]:
			add("%s.kid: %q is listed twice", where, k.KID)
		}
		kids[k.KID] = true
		if _, err := k.seed(); err != nil {
			add("%s: %v (a 32-byte Ed25519 seed in base64; see `fencegate proofkey`)", where, err)
		}
	}
}
