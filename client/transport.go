package client

import (
	"context"
	"net/http"

	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/lock"
)

// Header names the edge check reads (docs/api.md, "Envoy ext_authz"; package
// fencewire's). net/http canonicalises them ("X-Fence-Key").
const (
	HeaderKey    = fencewire.HeaderKey
	HeaderToken  = fencewire.HeaderToken
	HeaderLockID = fencewire.HeaderLockID
	HeaderProof  = fencewire.HeaderProof
)

// Fence is what a request to a protected API presents: the lock key, its
// fence, the gateway's signed write proof for the fence (routes with
// fence_proof=signed require it), and optionally the lockId as proof of
// ownership (the edge strips it before the request goes upstream).
type Fence struct {
	Key    string
	Token  string
	Proof  string // sent only if non-empty
	LockID string // sent only if non-empty
}

type fenceKey struct{}

// WithFence returns a context carrying h's key, fence and signed write
// proof (when the gateway gave one), which a Transport stamps on every
// request made with it. The proof can only write under that fence, so it is
// safe to send with every write. The lockId is not included; use
// WithFenceProof for that.
func WithFence(ctx context.Context, h lock.Held) context.Context {
	return context.WithValue(ctx, fenceKey{}, Fence{Key: h.Key, Token: h.Fence, Proof: h.Proof})
}

// WithFenceProof is WithFence plus the lockId, for routes that require
// ownership proof by lockId (fence_proof=lockId).
func WithFenceProof(ctx context.Context, h lock.Held) context.Context {
	return context.WithValue(ctx, fenceKey{}, Fence{Key: h.Key, Token: h.Fence, Proof: h.Proof, LockID: h.LockID})
}

// Transport stamps the fence headers on requests to a protected API. The
// fence comes from the request's context (WithFence) or, failing that, from
// Static. A request with neither is sent unchanged.
type Transport struct {
	// Base sends the request; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Static is used when the request's context carries no fence.
	Static *Fence
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport over base with no static fence.
func NewTransport(base http.RoundTripper) *Transport { return &Transport{Base: base} }

// RoundTrip implements http.RoundTripper. It clones the request before
// changing headers, as the RoundTripper contract requires.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	f, ok := req.Context().Value(fenceKey{}).(Fence)
	if !ok && t.Static != nil {
		f, ok = *t.Static, true
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !ok {
		return base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Header.Set(HeaderKey, f.Key)
	r.Header.Set(HeaderToken, f.Token)
	if f.LockID != "" {
		r.Header.Set(HeaderLockID, f.LockID)
	} else {
		r.Header.Del(HeaderLockID)
	}
	if f.Proof != "" {
		r.Header.Set(HeaderProof, f.Proof)
	} else {
		r.Header.Del(HeaderProof)
	}
	return base.RoundTrip(r)
}
