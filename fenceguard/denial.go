package fenceguard

import (
	"net/http"

	"github.com/fencegate/fencegate/fencewire"
)

// Header names, as the edge sends them (docs/api.md; package fencewire's, so
// the guard and the edge cannot disagree). HTTP header names are
// case-insensitive; net/http canonicalises them.
const (
	HeaderVerified   = fencewire.HeaderVerified   // the fence the edge checked and found current
	HeaderKey        = fencewire.HeaderKey        // the lock key, when the route takes it from a header
	HeaderProof      = fencewire.HeaderProof      // the signed write proof (package writeproof)
	HeaderReason     = fencewire.HeaderReason     // denials: the reason
	HeaderDecisionID = fencewire.HeaderDecisionID // the edge's decision id, echoed in denials
)

// Reason says why a write was refused. The values, and the status each is
// answered with, are the edge's (fencecheck.Reason): a client handles a
// refusal by the API exactly as one by the edge.
type Reason string

// The reasons the resource side can refuse a write for.
const (
	// ReasonMissing (428): the request carries no verified fence (it did
	// not pass a checking edge, or the edge did not check it).
	ReasonMissing Reason = fencewire.ReasonMissing
	// ReasonMalformed (400): a fence that is not 15 digits, a header sent
	// twice, or a key that does not match the handler's (see Options.Key).
	ReasonMalformed Reason = fencewire.ReasonMalformed
	// ReasonStale (409): a newer fence has already committed for the key.
	ReasonStale Reason = fencewire.ReasonStale
	// ReasonBadProof (403): proofs are required and the proof is missing,
	// malformed, not signed by a gateway key, or for another key or fence.
	ReasonBadProof Reason = fencewire.ReasonBadProof
	// ReasonUnavailable (503): the API could not decide (the gateway's keys
	// could not be fetched, the database failed). Fail closed.
	ReasonUnavailable Reason = fencewire.ReasonUnavailable
)

// Status is the HTTP status a refusal for r is answered with (the edge's:
// fencewire.Status).
func (r Reason) Status() int { return fencewire.Status(string(r)) }

// Result is the outcome of a fenced commit (pgfence, redisfence).
type Result struct {
	// Applied: the write was committed under Fence, and Fence is now the
	// key's stored fence.
	Applied bool
	// Fence is the fence the write carried.
	Fence string
	// Stored is the key's stored fence after the attempt: Fence when
	// applied; when refused, the newer fence that had already committed
	// (as of a read just after the refusal, so possibly newer still).
	Stored string
}

// Stale reports whether the write was refused because a newer fence had
// already committed for the key.
func (r Result) Stale() bool { return !r.Applied }

// Refuse answers r with the edge's denial for reason: its status,
// Content-Type application/json, Cache-Control no-store, x-fence-reason,
// x-fence-decision-id (the edge's, when it sent one) and the JSON body
// {"error","key","presented","current","decisionId"}. key and presented
// come from the request's Fence when Guard put one in its context; current
// names the newer fence for ReasonStale ("" otherwise).
func Refuse(w http.ResponseWriter, r *http.Request, reason Reason, current string) {
	f, _ := FromContext(r.Context())
	refuse(w, r, reason, f.Key, f.Fence, current)
}

// RefuseStale answers a commit that res refused: 409 stale, naming the
// stored fence as current.
func RefuseStale(w http.ResponseWriter, r *http.Request, res Result) {
	f, _ := FromContext(r.Context())
	presented := res.Fence
	if presented == "" {
		presented = f.Fence
	}
	refuse(w, r, ReasonStale, f.Key, presented, res.Stored)
}

func refuse(w http.ResponseWriter, r *http.Request, reason Reason, key, presented, current string) {
	id := edgeDecisionID(r)
	body := fencewire.Denial{Error: string(reason), Key: key, Presented: presented, Current: current, DecisionID: id}.JSON()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderReason, string(reason))
	h.Set(HeaderDecisionID, id)
	w.WriteHeader(reason.Status())
	_, _ = w.Write(body)
}

// maxDecisionID bounds the edge decision id echoed back (the edge's are 12
// characters); anything longer or outside base64url is not echoed.
const maxDecisionID = 64

// edgeDecisionID returns the edge's decision id from r when it is one
// plausible id, else "": a denial may link the edge's allow in its audit
// trail, but never echoes arbitrary client input.
func edgeDecisionID(r *http.Request) string {
	vs := r.Header.Values(HeaderDecisionID)
	if len(vs) != 1 || len(vs[0]) == 0 || len(vs[0]) > maxDecisionID {
		return ""
	}
	for i := 0; i < len(vs[0]); i++ {
		c := vs[0][i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return ""
		}
	}
	return vs[0]
}
