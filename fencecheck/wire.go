package fencecheck

import (
	"encoding/json"
	"strconv"
)

// The edge's wire contract (docs/api.md), shared by every transport that puts a
// decision on HTTP: authz (ext_authz, ext_proc, forward-auth) and proxy.
// Header names are lowercase, as Envoy hands them over; net/http
// canonicalises them.
const (
	HeaderKey      = "x-fence-key"      // the lock key, unless the route names it
	HeaderToken    = "x-fence-token"    // the presented fence, unless the route names another header
	HeaderLockID   = "x-fence-lock-id"  // the optional ownership proof; never reaches upstream
	HeaderProof    = "x-fence-proof"    // a signed write proof (package writeproof); reaches upstream, which may verify it too
	HeaderVerified = "x-fence-verified" // set towards upstream: the fence that was verified

	HeaderReason     = "x-fence-reason"      // denials: the reason
	HeaderDecisionID = "x-fence-decision-id" // every checked write: the decision id
	HeaderWouldDeny  = "x-fence-would-deny"  // towards upstream in dry-run: the reason enforce would have denied
)

// denialBody is the JSON body of a denial (docs/api.md). The key is the raw key
// the request named (its header or its path): the caller already holds it,
// and the body goes back only to that caller. LockIds never appear.
type denialBody struct {
	Error      string `json:"error"`
	Key        string `json:"key"`
	Presented  string `json:"presented"`
	Current    string `json:"current"`
	DecisionID string `json:"decisionId"`
}

// DenialJSON is the JSON body every edge answers a denial with.
func DenialJSON(d Decision) []byte {
	b, _ := json.Marshal(denialBody{ // a struct of strings always marshals
		Error:      string(d.Reason),
		Key:        d.Key,
		Presented:  d.Presented,
		Current:    d.Current,
		DecisionID: d.DecisionID,
	})
	return b
}

// DenialHeaders lists the response headers of a denial, in order, as
// (name, value) pairs: content type, reason, decision id, and for
// "draining" and "too-many-writes" the Retry-After seconds.
func DenialHeaders(d Decision) [][2]string {
	h := [][2]string{{"content-type", "application/json"}, {HeaderReason, string(d.Reason)}, {HeaderDecisionID, d.DecisionID}}
	if (d.Reason == ReasonDraining || d.Reason == ReasonTooManyWrites) && d.RetryAfter > 0 {
		h = append(h, [2]string{"retry-after", strconv.Itoa(d.RetryAfter)})
	}
	return h
}

// Verified reports whether d allowed a write on a fence it checked and
// found current (not a read, not policy off, not a dry-run would-deny): the
// edge then sets x-fence-verified towards upstream.
func Verified(d Decision) bool {
	return d.Allowed && !d.WouldDeny && d.Current != "" && d.Presented == d.Current
}
