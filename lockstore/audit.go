package lockstore

import (
	"context"
	"time"
)

// AuditEvent records one denial (or dry-run would-deny) of the edge check or
// the admission webhook. It carries the key's hash; the raw key only when
// the operator configured it. Backends store it as JSON with these names.
type AuditEvent struct {
	TimeMs     int64  `json:"timeMs"`
	DecisionID string `json:"decisionId"`
	Source     string `json:"source"` // "authz-grpc", "authz-http", "admission"
	Route      string `json:"route,omitempty"`
	KeyHash    string `json:"keyHash"`
	Key        string `json:"key,omitempty"` // only with raw-key auditing on
	Presented  string `json:"presented,omitempty"`
	Current    string `json:"current,omitempty"`
	Reason     string `json:"reason"`
	Policy     string `json:"policy"`
	Mode       string `json:"mode"` // "enforce", "dry-run", "warn"
	Peer       string `json:"peer,omitempty"`
	Method     string `json:"method,omitempty"`
	Path       string `json:"path,omitempty"` // without the query string
}

// AuditQuery selects audit events. Zero values mean "no filter"; Limit <= 0
// means the store's default page size.
type AuditQuery struct {
	KeyHash string
	SinceMs int64
	Limit   int
}

// AuditRetention bounds what a store keeps. Zero fields take the defaults.
type AuditRetention struct {
	MaxEvents int           // default 100000
	MaxAge    time.Duration // default 7 days
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
