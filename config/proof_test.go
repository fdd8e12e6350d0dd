package config

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProofConfig(t *testing.T) {
	seed := base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat("s", 32)))
	seedFile := filepath.Join(t.TempDir(), "k2.seed")
	if err := os.WriteFile(seedFile, []byte(seed+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, `
check: {hideCurrentFence: true}
proof:
  keys:
    - {kid: k1, privateKey: `+seed+`}
    - {kid: k2, privateKeyFile: `+seedFile+`}
`)
	cfg, err := load(t, []string{"--config", path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := cfg.Proof.LoadKeys()
	if err != nil || len(keys) != 2 || keys[0].KID != "k1" || string(keys[1].Seed) != strings.Repeat("s", 32) {
		t.Fatalf("keys %+v, %v", keys, err)
	}
	if !cfg.Check.HideCurrentFence || !cfg.Proof.Enabled() {
		t.Fatalf("config %+v", cfg)
	}
}

func TestProofConfigProblems(t *testing.T) {
	path := writeFile(t, `
proof:
  keys:
    - {kid: "a.b", privateKey: AAAA}
    - {kid: k2, privateKeyFile: /nonexistent/seed}
    - {kid: k2}
    - {kid: k4, privateKey: x, privateKeyFile: y}
`)
	_, err := load(t, []string{"--config", path}, nil)
	var p Problems
	if !errors.As(err, &p) {
		t.Fatalf("want Problems, got %v", err)
	}
	for _, want := range []string{`proof.keys[0].kid: "a.b"`, "proof.keys[0]: writeproof: seed is 3 bytes", "proof.keys[1]: open /nonexistent/seed",
		`proof.keys[2].kid: "k2" is listed twice`, "proof.keys[2]: privateKeyFile or privateKey is required", "proof.keys[3]: give privateKeyFile or privateKey, not both"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems do not mention %q:\n%v", want, err)
		}
	}
}
