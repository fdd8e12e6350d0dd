package fencecheck

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/lockstore"
)

// Policy is what a presented fence must match.
type Policy string

// Policies.
const (
	// PolicyHolder (the default) allows only the fence of a live lock.
	PolicyHolder Policy = "holder"
	// PolicyLatest allows the latest fence ever issued for the key, even
	// after that lock expired: the protected resource only needs to refuse
	// writes older than one it may already have seen.
	PolicyLatest Policy = "latest"
	// PolicyOff disables the check for the route (no backend read).
	PolicyOff Policy = "off"
)

// Mode says what a negative evaluation does.
type Mode string

// Modes.
const (
	// ModeEnforce (the default) denies.
	ModeEnforce Mode = "enforce"
	// ModeDryRun allows, audits the would-deny; for rolling a route out.
	ModeDryRun Mode = "dry-run"
	// ModeWarn allows, audits the would-deny and lets the transport tell the
	// caller (admission returns it as a warning).
	ModeWarn Mode = "warn"
)

// Reason says why a write was (or would have been) denied.
type Reason string

// Reasons, with the HTTP status each maps to (StatusOf).
const (
	ReasonMissing     Reason = fencewire.ReasonMissing     // 428: a write without a fence
	ReasonMalformed   Reason = fencewire.ReasonMalformed   // 400: fence not 15 digits, bad key (also one the backend refuses) or lockId
	ReasonStale       Reason = fencewire.ReasonStale       // 409: presented < latest issued
	ReasonNotHeld     Reason = fencewire.ReasonNotHeld     // 409: presented == latest, but no live lock holds it
	ReasonUnknown     Reason = fencewire.ReasonUnknown     // 409: presented > latest issued (never issued)
	ReasonWrongOwner  Reason = fencewire.ReasonWrongOwner  // 409: the lockId proof does not match the live lock
	ReasonBadProof    Reason = fencewire.ReasonBadProof    // 403: the route's required proof is missing, or not genuine for this key and fence (ProofMode)
	ReasonUnavailable Reason = fencewire.ReasonUnavailable // 503: backend error or deadline; fail closed
	// ReasonDraining: the fence is current, but on a barrier route a write
	// under an older fence of the key has not finished, and did not finish
	// within the route's wait budget (Request.MaxWait). 429 with
	// Retry-After: retriable, unlike 409 (the fence lost) and 503 (fail
	// closed).
	ReasonDraining Reason = fencewire.ReasonDraining
	// ReasonTooManyWrites: the fence is current and nothing older blocks
	// it, but on a barrier route the key already has its cap of writes in
	// flight (lockstore.WriteAdmission.MaxInFlight; entries of abandoned
	// writes count until their maxWrite). 429 with Retry-After: retriable
	// once some finish. The cap is what keeps one key's abandoned writes
	// from growing without bound in the store.
	ReasonTooManyWrites Reason = fencewire.ReasonTooManyWrites
)

// Reasons lists every Reason in a stable order (for metrics and docs).
var Reasons = []Reason{ReasonMissing, ReasonMalformed, ReasonStale, ReasonNotHeld,
	ReasonUnknown, ReasonWrongOwner, ReasonBadProof, ReasonUnavailable, ReasonDraining, ReasonTooManyWrites}

// StatusOf returns the HTTP status a denial for reason r is answered with,
// and 200 for the empty reason (allowed).
func StatusOf(r Reason) int {
	if r == "" {
		return http.StatusOK
	}
	return fencewire.Status(string(r)) // anything unexpected fails closed: 503
}

// ParsePolicy parses a route's policy; "" is PolicyHolder. Matching is
// case-insensitive.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case PolicyHolder, PolicyLatest, PolicyOff:
		return p, nil // a compiled route's value: no folding
	}
	switch p := Policy(strings.ToLower(strings.TrimSpace(s))); p {
	case "":
		return PolicyHolder, nil
	case PolicyHolder, PolicyLatest, PolicyOff:
		return p, nil
	}
	return "", fmt.Errorf("fencecheck: unknown policy %q (want holder, latest or off)", s)
}

// ParseMode parses a route's mode; "" is ModeEnforce. "dryrun" and
// "dry_run" are accepted for "dry-run". Matching is case-insensitive.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeEnforce, ModeDryRun, ModeWarn:
		return m, nil // a compiled route's value: no folding
	}
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return ModeEnforce, nil
	case ModeEnforce, ModeDryRun, ModeWarn:
		return m, nil
	case "dryrun", "dry_run":
		return ModeDryRun, nil
	}
	return "", fmt.Errorf("fencecheck: unknown mode %q (want enforce, dry-run or warn)", s)
}

// Request is one edge check. The transport fills it from its wire format.
type Request struct {
	Key    string // the lock key (raw; normalised by Check)
	Fence  string // the presented fence; "" when none was presented
	LockID string // the optional ownership proof; "" when none
	Write  bool   // whether the request is a write (see WriteMethods)
	// Ambiguous: the transport found an input it cannot read one way, such
	// as the fence header sent twice (the upstream may read the other
	// copy). A write is denied 400 "malformed" without a backend read.
	Ambiguous bool

	// Policy, Mode and ProofMode are the route's options ("" is
	// PolicyHolder, ModeEnforce, ProofNone). A Request built by a compiled
	// Route (Route.Request, Route.WriteRequest, Refuse) carries the
	// route's values and the route: the check takes them as compiled,
	// parsing nothing. Set by hand (a library's caller, a test), or
	// changed after, they are parsed per check (ParsePolicy, ParseMode,
	// ParseProofMode), and one that does not parse fails a write closed.
	Policy Policy
	Mode   Mode

	// ProofMode is what the write must carry besides its fence (see
	// ProofMode); Proof is the signed write proof presented ("" when none).
	ProofMode ProofMode
	Proof     string

	// Audit context; none of it changes the decision.
	Route  string // the route's name, as configured at the proxy
	Source string // "authz-grpc", "authz-http", "admission"
	Peer   string // the client's address, as the proxy saw it
	Method string // the original method
	Path   string // the original path, without the query string; audited only with raw keys

	// SkipAudit suppresses the audit event (admission dry-run reviews must
	// have no side effects). Metrics are still counted.
	SkipAudit bool

	// Barrier turns the write barrier on for this write (see the package
	// doc): the check admits the write through the store's
	// lockstore.WriteBarrier, and an allowed Decision carries a WriteID the
	// transport must hand back to Finish once the upstream has answered.
	// Only a transport that sees the upstream's response may set it.
	Barrier bool
	// MaxWrite is how long after admission a barrier write counts as
	// finished even if Finish never comes (the upstream exchange failed or
	// the edge died); 0 is DefaultMaxWrite.
	MaxWrite time.Duration
	// MaxWait bounds how long a barrier write under a current fence waits
	// for older writes of its key to finish before it is refused
	// "draining", counted from the first answer that found it blocked;
	// 0 is the Checker's Timeout (what an edge whose caller allows one
	// message timeout, such as Envoy ext_proc, can afford; `fencegate
	// proxy` passes its own default, DefaultMaxWait). Above the
	// Checker's MaxWaitCap the write fails closed (ErrMaxWaitOverCap).
	// Each store call of the wait keeps its own Timeout; the caller's
	// context still ends the wait (a client that left).
	MaxWait time.Duration
	// RouteError, when non-nil, says the transport found the route's
	// options unusable (such as the barrier asked of an edge that cannot
	// report completion). A write fails closed like a route with an
	// unknown policy: 503 "unavailable", logged at warn, error returned.
	// Reads still pass.
	RouteError error

	// route is the compiled route the Request was built by (nil: by hand).
	route *Route
	// normKey is Key normalised (lockstore.NormalizeKey) by NormalizeKey;
	// normOf the Key it was normalised from.
	normKey, normOf string
}

// NormalizeKey returns the request's key normalised as every store reads
// it (lockstore.NormalizeKey), for a transport that must read the key
// itself before the check (a credential's key scope). The Request keeps
// the result: the check normalises the key once per decision, here or in
// Check, never twice. Key stays as sent (audit, Decision.Key).
func (r *Request) NormalizeKey() (string, error) {
	if r.normKey != "" && r.normOf == r.Key {
		return r.normKey, nil
	}
	nk, err := lockstore.NormalizeKey(r.Key)
	if err != nil {
		return "", err
	}
	r.normKey, r.normOf = nk, r.Key
	return nk, nil
}

// checkOptions are the options a Request is checked under, and the error
// of each that does not parse.
type checkOptions struct {
	policy                       Policy
	mode                         Mode
	proof                        ProofMode
	policyErr, modeErr, proofErr error
}

// options returns r's route options. A Request built by a compiled route
// whose options all parsed, with the route's values unchanged, takes them
// as they are; any other (built by hand, changed after, or a route that
// fails closed anyway) has its fields parsed.
func (r *Request) options() checkOptions {
	if rt := r.route; rt != nil && rt.err == nil && r.Policy == rt.Policy && r.Mode == rt.Mode && r.ProofMode == rt.Proof {
		return checkOptions{policy: rt.Policy, mode: rt.Mode, proof: rt.Proof}
	}
	var o checkOptions
	o.policy, o.policyErr = ParsePolicy(string(r.Policy))
	o.mode, o.modeErr = ParseMode(string(r.Mode))
	o.proof, o.proofErr = ParseProofMode(string(r.ProofMode))
	return o
}

// Decision is the outcome of a check.
type Decision struct {
	// Allowed says whether the request may pass. In dry-run and warn modes
	// it is true even when the evaluation was negative.
	Allowed bool
	// WouldDeny is set in dry-run and warn modes when enforce would have
	// denied; Reason then names why.
	WouldDeny bool
	// Reason is why the request was (or would have been) denied; "" when
	// the evaluation was positive or skipped.
	Reason Reason
	// Status is what the transport answers: 200 when Allowed, else
	// StatusOf(Reason). (For a would-deny, StatusOf(Reason) is the status
	// enforce mode would have answered.)
	Status int
	// Presented is the fence the request carried; Current is the latest
	// fence ever issued for the key ("" when none, or not read).
	Presented string
	Current   string
	// DecisionID identifies the decision in logs, audit and responses. Every
	// decision that reads the backend or denies has one.
	DecisionID string
	// Key is the key as requested (raw). Transports decide whether to echo
	// it; audit events carry its hash unless raw-key auditing is on.
	Key    string
	Policy Policy
	Mode   Mode

	// WriteID is set when the write was admitted under the barrier: the
	// store holds an in-flight entry for it until Checker.Finish (or until
	// MaxWrite passes). Empty otherwise.
	WriteID string
	// RetryAfter is, for a "draining" denial, when to retry in whole
	// seconds, rounded up: as long as the write already waited (at least
	// 1 s), or the time until the blocking writes count as finished even
	// without a response when that is sooner, at most MaxRetryAfter (see
	// retryAfter); for "too-many-writes", 1.
	RetryAfter int
	// Admitted is, for a write admitted under the barrier, when (by this
	// process's clock) the store call that admitted it began: its entry
	// lasts at least until Admitted + MaxWrite by the store's clock, so a
	// transport that cuts the upstream exchange by then has it over before
	// a newer fence can be let in. The wait before it is not counted.
	Admitted time.Time

	// barrierKey is the normalised key the write was admitted under; Finish
	// removes the entry there.
	barrierKey string
	// nkey is Key normalised, once the check did ("" before, or when it
	// does not normalise: a malformed key).
	nkey string
}

// auditKey is the key the decision's hashes are taken of: the normalised
// key when the check got that far, else the key as sent (HashKey and
// KeyDigest normalise what they are given; an NFC key passes through
// unchanged).
func (d Decision) auditKey() string {
	if d.nkey != "" {
		return d.nkey
	}
	return d.Key
}
