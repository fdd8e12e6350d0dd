package config

import (
	"fmt"
	"strings"
)

// ProofKeyProblems lists every route that requires a signed write proof
// (proof: signed) in a configuration with no key to verify one with
// (proof.keys or proof.verifyKeys). Such a gateway would start, pass its
// health checks and then refuse every write the route governs 503
// unavailable (the check fails closed without a verifier); it refuses to
// start instead (Validate, and the proxy's validation, include these), and
// `routes check` says so. Not part of ValidateRoutes: a table alone (what
// `routes istio` renders from) needs no key.
func (c *Config) ProofKeyProblems() []string {
	if len(c.Proof.Keys) > 0 || len(c.Proof.VerifyKeys) > 0 {
		return nil
	}
	const why = "proof: signed needs a key to verify proofs with, and there is none: add proof.keys (`fencegate proofkey --kid K` makes one; a proxy sidecar may use proof.verifyKeys), or every write this route governs is refused 503"
	var p []string
	for i, r := range c.Routes {
		if strings.EqualFold(strings.TrimSpace(r.Proof), "signed") {
			p = append(p, fmt.Sprintf("routes[%d] (%s): %s", i, r.Name, why))
		}
	}
	for i, r := range c.Proxy.Routes {
		if strings.EqualFold(strings.TrimSpace(r.Proof), "signed") {
			name := r.Name
			if name == "" {
				name = r.Prefix
			}
			p = append(p, fmt.Sprintf("proxy.routes[%d] (%s): %s", i, name, why))
		}
	}
	return p
}
