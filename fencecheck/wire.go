package fencecheck

import (
	"strconv"

	"github.com/fencegate/fencegate/fencewire"
)

// The edge's wire contract (docs/api.md) as every transport that puts a
// decision on HTTP answers it: authz (ext_authz, ext_proc, forward-auth) and
// proxy. The names (headers, reasons, the body's fields) are fencewire's.

// DenialJSON is the JSON body every edge answers a denial with.
func DenialJSON(d Decision) []byte {
	return fencewire.Denial{Error: string(d.Reason), Key: d.Key, Presented: d.Presented, Current: d.Current, DecisionID: d.DecisionID}.JSON()
}

// DenialHeaders lists the response headers of a denial, in order, as
// (name, value) pairs: content type, reason, decision id, and for
// "draining" and "too-many-writes" the Retry-After seconds.
func DenialHeaders(d Decision) [][2]string {
	h := [][2]string{{"content-type", "application/json"}, {fencewire.HeaderReason, string(d.Reason)}, {fencewire.HeaderDecisionID, d.DecisionID}}
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
