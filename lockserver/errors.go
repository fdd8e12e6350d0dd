package lockserver

import (
	"errors"
	"net/http"

	"github.com/fencegate/fencegate/api/wire"
	"github.com/fencegate/fencegate/lockstore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of fencegate's gRPC errors.
const ErrorDomain = wire.ErrorDomain

// apiError is a failure answered to the caller: a LockError code plus what
// the transports need to render it. Messages never contain raw keys,
// lockIds or tokens.
type apiError struct {
	code lockstore.Code
	msg  string
	// forbidden marks an AuthFailed for a valid token lacking scope (403 /
	// PERMISSION_DENIED) rather than a missing or bad one (401 /
	// UNAUTHENTICATED).
	forbidden bool
	// wwwAuth is the RFC 6750 error hint for 401/403 ("invalid_token",
	// "insufficient_scope"); empty for a missing token.
	wwwAuth string
	// httpStatus overrides the code's status for transport-level failures
	// that the code table does not cover (404 route, 405 method, 501).
	httpStatus int
	// cause is logged, never sent.
	cause error
}

func (e *apiError) Error() string { return string(e.code) + ": " + e.msg }
func (e *apiError) Unwrap() error { return e.cause }

func invalidArgument(msg string) *apiError {
	return &apiError{code: lockstore.InvalidArgument, msg: msg}
}

// asAPIError turns any error from the store or the request handling into an
// apiError. Store errors keep their code and their Msg, which the lockstore
// contract keeps free of raw keys and lockIds; the wrapped cause (driver
// text, addresses) stays in the logs.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	code := lockstore.CodeOf(err)
	msg := string(code)
	var le *lockstore.Error
	if errors.As(err, &le) && le.Msg != "" {
		msg = le.Msg
	}
	return &apiError{code: code, msg: msg, cause: err}
}

// HTTPStatus is docs/api.md's status for a LockError code (wire.HTTPStatus).
// AuthFailed is 401 here; the 403 case is decided by the caller, which
// knows whether a token was valid.
func HTTPStatus(c lockstore.Code) int { return wire.HTTPStatus(c) }

// GRPCCode is docs/api.md's gRPC status code for a LockError code
// (wire.GRPCCode: AuthFailed as UNAUTHENTICATED; PERMISSION_DENIED is
// decided by the caller).
func GRPCCode(c lockstore.Code) codes.Code { return wire.GRPCCode(c) }

func (e *apiError) httpStatusCode() int {
	switch {
	case e.httpStatus != 0:
		return e.httpStatus
	case e.code == lockstore.AuthFailed && e.forbidden:
		return http.StatusForbidden
	}
	return HTTPStatus(e.code)
}

// grpcStatus renders e as wire.GRPCStatus: the status code, and an
// ErrorInfo detail whose Reason is the LockError code, so clients branch on
// the code, not the message.
func (e *apiError) grpcStatus() *status.Status {
	return wire.GRPCStatus(e.code, e.forbidden, e.msg)
}

// CodeFromStatus extracts the LockError code from a gRPC status produced by
// this package ("" when the status carries none): wire.CodeFromStatus.
func CodeFromStatus(st *status.Status) lockstore.Code { return wire.CodeFromStatus(st) }
