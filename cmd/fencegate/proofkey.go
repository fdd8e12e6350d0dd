package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io"
	"os"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/writeproof"
)

// runProofKey prints a fresh Ed25519 write-proof key as a proof.keys
// config entry. With --out the seed goes to a new 0600 file and the entry
// names it; without, the seed is inline (move it to a Secret).
func runProofKey(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("proofkey", "")
	kid := fs.String("kid", "", "key id, 1 to 32 characters of [A-Za-z0-9_-] (e.g. the date: 2026-11)")
	out := fs.String("out", "", "write the private seed to this new file (mode 0600) instead of printing it")
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencegate proofkey: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if !writeproof.ValidKID(*kid) {
		fmt.Fprintln(stderr, "fencegate proofkey: --kid is required: 1 to 32 characters of [A-Za-z0-9_-]")
		return exitUsage
	}
	seed := writeproof.GenerateSeed()
	enc := base64.RawURLEncoding.EncodeToString(seed)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	fmt.Fprintf(stdout, "# write-proof key %s; public key (served at /v1/proof/keys): %s\n", *kid, base64.RawURLEncoding.EncodeToString(pub))
	fmt.Fprintln(stdout, "# list it second to let gateways verify it, then first to sign with it;")
	fmt.Fprintf(stdout, "# a fencegate proxy that only verifies lists the public key instead: proof.verifyKeys: [{kid: %s, publicKey: %s}]\n", *kid, base64.RawURLEncoding.EncodeToString(pub))
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			fmt.Fprintln(stderr, "fencegate proofkey:", err)
			return exitFailure
		}
		_, werr := fmt.Fprintln(f, enc)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			fmt.Fprintln(stderr, "fencegate proofkey:", werr)
			return exitFailure
		}
		fmt.Fprintf(stdout, "proof:\n  keys:\n    - kid: %s\n      privateKeyFile: %s\n", *kid, *out)
		return exitOK
	}
	fmt.Fprintf(stdout, "proof:\n  keys:\n    - kid: %s\n      privateKey: %s   # secret: prefer privateKeyFile\n", *kid, enc)
	return exitOK
}

// proofSigner builds the write-proof signer from the configuration; nil
// when no keys are configured.
func proofSigner(c config.Proof) (*writeproof.Signer, error) {
	if !c.Enabled() {
		return nil, nil
	}
	keys, err := c.LoadKeys()
	if err != nil {
		return nil, err
	}
	return writeproof.NewSigner(keys)
}

// proofVerifier is every key a write proof is checked with: the signing
// keys' public halves and the verify-only keys (proof.verifyKeys). nil when
// there are none: a signed route then fails closed.
func proofVerifier(c config.Proof) (*writeproof.Verifier, error) {
	pubs, err := c.LoadVerifyKeys()
	if err != nil {
		return nil, err
	}
	if c.Enabled() {
		keys, err := c.LoadKeys()
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			pubs[k.KID] = ed25519.NewKeyFromSeed(k.Seed).Public().(ed25519.PublicKey)
		}
	}
	if len(pubs) == 0 {
		return nil, nil
	}
	return writeproof.NewVerifier(pubs)
}
