package fencewire

import (
	"encoding/json"
	"net/http"
)

// Denial reasons: the "error" of a denial's body and its HeaderReason.
// fencecheck.Reason and fenceguard.Reason type them; Status maps each to its
// HTTP status.
const (
	ReasonMissing     = "missing"     // 428: a write without a fence
	ReasonMalformed   = "malformed"   // 400: fence not 15 digits, bad key or lockId, an input sent twice
	ReasonStale       = "stale"       // 409: presented < latest issued (at the resource: a newer fence committed)
	ReasonNotHeld     = "not-held"    // 409: presented == latest, but no live lock holds it
	ReasonUnknown     = "unknown"     // 409: presented > latest issued (never issued)
	ReasonWrongOwner  = "wrong-owner" // 409: the lockId proof does not match the live lock
	ReasonBadProof    = "bad-proof"   // 403: the required proof is missing, or not genuine for this key and fence
	ReasonUnavailable = "unavailable" // 503: could not decide; fail closed
	// ReasonDraining (429, Retry-After): on a barrier route, a write under
	// an older fence of the key has not finished within the route's wait.
	ReasonDraining = "draining"
	// ReasonTooManyWrites (429, Retry-After): on a barrier route, the key
	// already has its cap of writes in flight.
	ReasonTooManyWrites = "too-many-writes"
)

// Status is the HTTP status a denial for reason is answered with; anything
// unexpected is 503, failing closed.
func Status(reason string) int {
	switch reason {
	case ReasonMissing:
		return http.StatusPreconditionRequired
	case ReasonMalformed:
		return http.StatusBadRequest
	case ReasonStale, ReasonNotHeld, ReasonUnknown, ReasonWrongOwner:
		return http.StatusConflict
	case ReasonDraining, ReasonTooManyWrites:
		return http.StatusTooManyRequests
	case ReasonBadProof:
		// Not a conflict with the lock's state: the sender has not shown
		// it may write at all (and retrying with the same input is futile).
		return http.StatusForbidden
	default: // ReasonUnavailable, and anything unexpected
		return http.StatusServiceUnavailable
	}
}

// Denial is the JSON body every denial is answered with, by the edge and by
// the resource side alike. Key is the raw key the request named (its header
// or its path): the caller already holds it, and the body goes back only to
// that caller. LockIds never appear.
type Denial struct {
	Error      string `json:"error"` // the reason
	Key        string `json:"key"`
	Presented  string `json:"presented"`
	Current    string `json:"current"`
	DecisionID string `json:"decisionId"`
}

// JSON is d's body: {"error","key","presented","current","decisionId"},
// encoding/json's escaping (HTML-safe).
func (d Denial) JSON() []byte {
	b, _ := json.Marshal(d) // a struct of strings always marshals
	return b
}
