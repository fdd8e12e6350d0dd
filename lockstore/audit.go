package lockstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"golang.org/x/text/unicode/norm"
)

// AuditEvent records one denial (or dry-run would-deny) of the edge check or
// the admission webhook. It carries the key's hash and digest; the raw key
// only when the operator configured it. Backends store it as JSON with these
// names.
type AuditEvent struct {
	TimeMs     int64  `json:"timeMs"`
	DecisionID string `json:"decisionId"`
	Source     string `json:"source"` // "authz-grpc", "authz-http", "admission"
	Route      string `json:"route,omitempty"`
	// KeyHash is HashKey of the key, as SyncGuard reports it. It identifies
	// the key for people; it is not what a key filter matches, since a key
	// with the same 96-bit non-cryptographic hash is cheap to construct.
	KeyHash string `json:"keyHash"`
	// KeyDigest is the key's KeyDigest in hex (DigestKey(key).String()):
	// what AuditQuery.Key matches.
	// Events stored before it existed have none and match no key filter.
	KeyDigest string `json:"keyDigest,omitempty"`
	Key       string `json:"key,omitempty"` // only with raw-key auditing on
	Presented string `json:"presented,omitempty"`
	Current   string `json:"current,omitempty"`
	Reason    string `json:"reason"`
	Policy    string `json:"policy"`
	Mode      string `json:"mode"` // "enforce", "dry-run", "warn"
	Peer      string `json:"peer,omitempty"`
	Method    string `json:"method,omitempty"`
	Path      string `json:"path,omitempty"` // without the query string
}

// KeyDigest is the SHA-256 of a key's NFC form (DigestKey): the key's
// collision-resistant identity, and the one meaning of the name. Audit
// scoping matches it (AuditEvent.KeyDigest holds its String), and a write
// proof carries its bytes (writeproof.Claims.KeyDigest). HashKey is
// SyncGuard's display hash; colliding keys can be built for it in seconds.
type KeyDigest [sha256.Size]byte

// DigestKey returns key's KeyDigest: SHA-256 of norm.NFC(key).
func DigestKey(key string) KeyDigest {
	return sha256.Sum256([]byte(norm.NFC.String(key)))
}

// String returns d as 64 lowercase hex digits, as audit events hold it.
func (d KeyDigest) String() string { return hex.EncodeToString(d[:]) }

// AuditQuery selects audit events. Zero values mean "no filter"; Limit <= 0
// means the store's default page size.
type AuditQuery struct {
	// Key, when set, selects the events of this key: those whose KeyDigest
	// is DigestKey(Key).String(). A store may narrow by HashKey(Key) first (it is
	// what its indexes hold), but the digest decides.
	Key     string
	SinceMs int64
	Limit   int
}

// AuditClass splits audit events into two retention classes, so that
// events anyone can forge by the thousand cannot evict the ones that
// record a real fencing failure.
type AuditClass int

// Audit classes.
const (
	// AuditDecision: a denial the backend's state decided (stale,
	// not-held, unknown, wrong-owner, draining) or could not decide
	// (unavailable).
	AuditDecision AuditClass = iota
	// AuditInput: a denial decided from the request alone, without a
	// backend read (missing, malformed, bad-proof): any client can send
	// these, and they never evict a decision event.
	AuditInput
)

// String returns "decision" or "input".
func (c AuditClass) String() string {
	if c == AuditInput {
		return "input"
	}
	return "decision"
}

// Class returns ev's retention class, from its reason.
func (ev AuditEvent) Class() AuditClass {
	switch ev.Reason {
	case "missing", "malformed", "bad-proof":
		return AuditInput
	}
	return AuditDecision
}

// AuditRetention bounds what a store keeps. Zero fields take the defaults.
// Each class has its own count budget: input events are trimmed against
// MaxInputEvents among themselves and never evict a decision event.
type AuditRetention struct {
	MaxEvents      int           // decision events kept; default 100000
	MaxInputEvents int           // input events kept; default MaxEvents
	MaxAge         time.Duration // default 7 days, both classes
}

// MaxEventsOf returns the count budget of class c.
func (r AuditRetention) MaxEventsOf(c AuditClass) int {
	if c == AuditInput {
		return r.MaxInputEvents
	}
	return r.MaxEvents
}

// Audit retention defaults.
const (
	DefaultAuditMaxEvents = 100_000
	DefaultAuditMaxAge    = 7 * 24 * time.Hour
	DefaultAuditLimit     = 100
	MaxAuditLimit         = 1000
)

// WithDefaults fills zero fields.
func (r AuditRetention) WithDefaults() AuditRetention {
	if r.MaxEvents <= 0 {
		r.MaxEvents = DefaultAuditMaxEvents
	}
	if r.MaxInputEvents <= 0 {
		r.MaxInputEvents = r.MaxEvents
	}
	if r.MaxAge <= 0 {
		r.MaxAge = DefaultAuditMaxAge
	}
	return r
}

// AuditLog stores audit events with bounded retention. Every fencegate store
// implements it, so the trail lives wherever the locks live.
type AuditLog interface {
	// AppendAudit stores events. It may drop events past the retention bounds.
	AppendAudit(ctx context.Context, events []AuditEvent) error
	// QueryAudit returns matching events, newest first.
	QueryAudit(ctx context.Context, q AuditQuery) ([]AuditEvent, error)
}
