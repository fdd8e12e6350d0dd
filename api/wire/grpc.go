package wire

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/lockstore"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of fencegate's gRPC errors.
const ErrorDomain = "fencegate.io"

// GRPCCode is docs/api.md's gRPC status code for a LockError code. AuthFailed is
// UNAUTHENTICATED here; PERMISSION_DENIED is decided by the server, which
// knows whether a token was valid.
func GRPCCode(c lockstore.Code) codes.Code {
	switch c {
	case lockstore.InvalidArgument:
		return codes.InvalidArgument
	case lockstore.AuthFailed:
		return codes.Unauthenticated
	case lockstore.RateLimited:
		return codes.ResourceExhausted
	case lockstore.ServiceUnavailable:
		return codes.Unavailable
	case lockstore.NetworkTimeout, lockstore.AcquisitionTimeout:
		return codes.DeadlineExceeded
	case lockstore.Aborted:
		return codes.Canceled
	default:
		return codes.Internal
	}
}

// GRPCStatus is the status the server answers for a LockError: GRPCCode's
// status code (PERMISSION_DENIED instead of UNAUTHENTICATED when forbidden,
// a valid token lacking scope) and a google.rpc.ErrorInfo detail whose
// Reason is the code, so that clients branch on the code and not on the
// status code, which two LockError codes share.
func GRPCStatus(c lockstore.Code, forbidden bool, msg string) *status.Status {
	sc := GRPCCode(c)
	if c == lockstore.AuthFailed && forbidden {
		sc = codes.PermissionDenied
	}
	st := status.New(sc, msg)
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(c), Domain: ErrorDomain}); err == nil {
		return withInfo
	}
	return st
}

// CodeFromStatus is the LockError code a status's fencegate ErrorInfo
// names, or "" when it carries none that is one of lockstore.Codes (a
// proxy's status, or one the client library made up locally).
func CodeFromStatus(st *status.Status) lockstore.Code {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			if c := lockstore.Code(info.GetReason()); KnownCode(c) {
				return c
			}
		}
	}
	return ""
}

// CodeForGRPC is the inverse of GRPCCode, for a status that names no code
// (CodeFromStatus is ""). PERMISSION_DENIED is AuthFailed; DEADLINE_EXCEEDED,
// which AcquisitionTimeout shares, is NetworkTimeout; status codes the
// server never sends are Internal.
func CodeForGRPC(c codes.Code) lockstore.Code {
	switch c {
	case codes.PermissionDenied:
		return lockstore.AuthFailed
	case codes.DeadlineExceeded:
		return lockstore.NetworkTimeout
	}
	return inverse(c, GRPCCode)
}
