// Package wire is the lock API's wire format (docs/api.md): the HTTP/JSON
// paths, request and reply bodies, and the mapping between LockError codes
// and HTTP statuses (wire.go), and the mapping between LockError codes and
// gRPC statuses with their ErrorInfo detail (grpc.go; the gRPC messages
// are generated in api/proto). The server (package api) and the Go clients
// (package client) both speak it from here, so neither can drift from the
// other. It imports nothing of ours but lockstore.
package wire

import (
	"net/http"

	"github.com/fencegate/fencegate/lockstore"
)

// Paths of the lock API.
const (
	PathAcquire = "/v1/locks/acquire"
	PathRelease = "/v1/locks/release"
	PathExtend  = "/v1/locks/extend"
	PathLookup  = "/v1/locks/lookup"
	PathStatus  = "/v1/locks/status" // GET ?key=K
	PathAudit   = "/v1/audit"        // GET ?key=K&since=MS&limit=N
	// PathProofKeys serves the public keys that verify write proofs (a
	// writeproof.KeySet), without auth: they are public.
	PathProofKeys = "/v1/proof/keys"
)

// Request and reply bodies. Optional request fields are pointers so that
// "absent" and "zero" differ: an absent ttlMs takes the default, an
// explicit 0 is rejected.
type (
	// AcquireRequest is the body of POST PathAcquire.
	AcquireRequest struct {
		Key    string `json:"key"`
		TTLMs  *int64 `json:"ttlMs,omitempty"`
		WaitMs *int64 `json:"waitMs,omitempty"`
	}
	// AcquireReply answers PathAcquire: 200 with OK, or 409 with
	// Reason "locked".
	AcquireReply struct {
		OK          bool   `json:"ok"`
		Reason      string `json:"reason,omitempty"`
		LockID      string `json:"lockId,omitempty"`
		Fence       string `json:"fence,omitempty"`
		ExpiresAtMs int64  `json:"expiresAtMs,omitempty"`
		// Proof is a signed write proof for Fence (package writeproof),
		// when the gateway has proof keys: send it as x-fence-proof.
		Proof string `json:"proof,omitempty"`
	}
	// ReleaseRequest is the body of POST PathRelease.
	ReleaseRequest struct {
		LockID string `json:"lockId"`
	}
	// ExtendRequest is the body of POST PathExtend.
	ExtendRequest struct {
		LockID string `json:"lockId"`
		TTLMs  *int64 `json:"ttlMs,omitempty"`
	}
	// OKReply answers PathRelease and PathExtend: 200 with OK, or 404
	// when the lock is not held.
	OKReply struct {
		OK          bool  `json:"ok"`
		ExpiresAtMs int64 `json:"expiresAtMs,omitempty"`
	}
	// LookupRequest is the body of POST PathLookup: exactly one of Key
	// and LockID. It answers a lockstore.LockInfo, or 404 with {}.
	LookupRequest struct {
		Key    *string `json:"key,omitempty"`
		LockID *string `json:"lockId,omitempty"`
	}
	// StatusReply answers PathStatus.
	StatusReply struct {
		Locked bool `json:"locked"`
	}
	// AuditReply answers PathAudit, newest first.
	AuditReply struct {
		Events []lockstore.AuditEvent `json:"events"`
	}
	// ErrorReply is every error answer's body.
	ErrorReply struct {
		Error ErrorBody `json:"error"`
	}
	// ErrorBody carries the LockError code and a message free of secrets.
	ErrorBody struct {
		Code    lockstore.Code `json:"code"`
		Message string         `json:"message"`
	}
)

// StatusClientClosed is nginx's "client closed request", docs/api.md's status
// for Aborted (the caller went away; nobody reads the answer).
const StatusClientClosed = 499

// HTTPStatus is docs/api.md's status for a LockError code. AuthFailed is 401
// here; the 403 case is decided by the server, which knows whether a token
// was valid.
func HTTPStatus(c lockstore.Code) int {
	switch c {
	case lockstore.InvalidArgument:
		return http.StatusBadRequest
	case lockstore.AuthFailed:
		return http.StatusUnauthorized
	case lockstore.RateLimited:
		return http.StatusTooManyRequests
	case lockstore.AcquisitionTimeout:
		return http.StatusRequestTimeout
	case lockstore.Aborted:
		return StatusClientClosed
	case lockstore.ServiceUnavailable:
		return http.StatusServiceUnavailable
	case lockstore.NetworkTimeout:
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

// CodeForStatus is the inverse of HTTPStatus, for an error answer whose
// body names no known code (a proxy's page, say). Statuses the server never
// sends for a code map where they mean the same: 403 is AuthFailed (a
// valid token out of scope), 413 and 415 are InvalidArgument (a body the
// server refused), 502 is ServiceUnavailable (a proxy found no gateway).
func CodeForStatus(status int) lockstore.Code {
	switch status {
	case http.StatusForbidden:
		return lockstore.AuthFailed
	case http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return lockstore.InvalidArgument
	case http.StatusBadGateway:
		return lockstore.ServiceUnavailable
	}
	return inverse(status, HTTPStatus)
}

// inverse is the code forward maps to v, for the values that name one
// code; Internal (which several values fall back to) when none does.
func inverse[T comparable](v T, forward func(lockstore.Code) T) lockstore.Code {
	for _, c := range lockstore.Codes {
		if c != lockstore.Internal && forward(c) == v {
			return c
		}
	}
	return lockstore.Internal
}

// KnownCode reports whether c is one of lockstore.Codes.
func KnownCode(c lockstore.Code) bool {
	for _, k := range lockstore.Codes {
		if c == k {
			return true
		}
	}
	return false
}
