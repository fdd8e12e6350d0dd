package fencecheck

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/writeproof"
)

// ProofMode is what a write must carry besides its fence to show that its
// sender holds the lock. A fence alone is not a secret (fences count up,
// and denials may name the current one), so a route that must refuse
// forgers, not only slow holders, requires a proof.
type ProofMode string

// Proof modes.
const (
	// ProofNone (the default): the fence is enough; a lockId, if sent, is
	// still checked.
	ProofNone ProofMode = "none"
	// ProofLockID: the lockId (x-fence-lock-id) is required and must be
	// the live lock's. The lockId can also release and extend the lock.
	ProofLockID ProofMode = "lockId"
	// ProofSigned: a write proof (x-fence-proof, package writeproof)
	// signed by one of the gateway's keys, for this key and the presented
	// fence, is required; it can write and nothing else.
	ProofSigned ProofMode = "signed"
)

// ParseProofMode parses a route's proof mode; "" is ProofNone. Matching is
// case-insensitive ("lockid", "lock-id" and "lock_id" are ProofLockID).
func ParseProofMode(s string) (ProofMode, error) {
	switch m := ProofMode(s); m {
	case ProofNone, ProofLockID, ProofSigned:
		return m, nil // a compiled route's value: no folding
	}
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "none":
		return ProofNone, nil
	case "lockid", "lock-id", "lock_id":
		return ProofLockID, nil
	case "signed":
		return ProofSigned, nil
	}
	return "", fmt.Errorf("fencecheck: unknown proof mode %q (want none, lockId or signed)", s)
}

// errNoProofKeys: a route requires signed proofs and the gateway has no
// proof keys to verify them with. It is the deployment's fault, and the
// route fails closed (503) until it is fixed.
var errNoProofKeys = errors.New("fencecheck: the route requires signed proofs (fence_proof=signed) but no proof keys are configured")

// proofCheck is the outcome of checking a request's proof before the
// backend read.
type proofCheck struct {
	mode   ProofMode
	claims *writeproof.Claims // the verified proof's claims (signed mode)
}

// checkProofInput checks what the route's proof mode asks of the request
// itself, before any backend read: a missing or invalid proof is a
// "bad-proof" denial that costs no store read (a forger's requests must
// be cheap to refuse). key is the normalised key. It returns the reason of
// a denial ("" when the request passes), or an error when the route cannot
// be decided (no keys for a signed route).
func (c *Checker) checkProofInput(ctx context.Context, r Request, key string, pc *proofCheck) (Reason, error) {
	switch pc.mode {
	case ProofLockID:
		if r.LockID == "" {
			return ReasonBadProof, nil
		}
	case ProofSigned:
		if c.proofs == nil {
			return "", errNoProofKeys
		}
		if r.Proof == "" {
			return ReasonBadProof, nil
		}
		claims, err := c.proofs.Verify(r.Proof, key, r.Fence)
		if err != nil {
			// Which check failed is for the operator, at debug: the
			// caller learns only "bad-proof".
			c.log.LogAttrs(ctx, slog.LevelDebug, "fencecheck: write proof refused",
				slog.String("route", r.Route), slog.Any("error", err))
			return ReasonBadProof, nil
		}
		pc.claims = &claims
	}
	return "", nil
}

// proofHolds reports whether a verified proof was issued to the live
// lock's holder. The fence already names one acquire of the key, so this
// only matters if two holders could ever share a fence (a store restored
// from a backup); it costs nothing, since the live lock was read anyway.
func proofHolds(pc proofCheck, live *lockstore.Lock) bool {
	if pc.claims == nil || live == nil || live.Fence != pc.claims.Fence {
		return true
	}
	h := writeproof.LockIDHash(live.LockID)
	return subtle.ConstantTimeCompare(h[:], pc.claims.LockIDHash[:]) == 1
}
