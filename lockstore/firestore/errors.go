package firestore

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// codeFor maps a gRPC status code to the contract (docs/design.md,
// "Backends"). ok is false for codes that mean "unexpected".
//
//   - ABORTED reaches us only after the client library has spent its
//     MaxAttempts on commit conflicts: contention the caller may retry, so
//     ServiceUnavailable like the other transient codes.
//   - DEADLINE_EXCEEDED without our own context expiring is the service's
//     (or an RPC-level) timeout, an infrastructure timeout per the spec.
//   - FAILED_PRECONDITION is also what Firestore returns for a query whose
//     composite index is missing: a deployment error, InvalidArgument.
//   - NOT_FOUND on our calls can only mean the database itself is missing
//     (absent documents are results, not errors): a configuration error.
//   - CANCELED without our context being done means the connection went
//     away under the call (e.g. the client was closed).
func codeFor(c codes.Code) (lockstore.Code, bool) {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Aborted, codes.Canceled:
		return lockstore.ServiceUnavailable, true
	case codes.PermissionDenied, codes.Unauthenticated:
		return lockstore.AuthFailed, true
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.NotFound:
		return lockstore.InvalidArgument, true
	case codes.ResourceExhausted:
		return lockstore.RateLimited, true
	}
	return lockstore.Internal, false
}

// errOpTimeout is the cause of a context ended by the store's own
// per-operation bound (Config.OpTimeout).
var errOpTimeout = errors.New("firestore: operation timeout")

// classify turns an error from the client library (or from inside one of
// our transaction functions) into a *lockstore.Error for operation op:
// backend.MapError (our own *lockstore.Error values pass through, a done
// caller's context decides, driverError maps the rest), except that our
// own per-operation bound running out is ServiceUnavailable.
func classify(ctx context.Context, op string, err error) error {
	var le *lockstore.Error
	if err != nil && !errors.As(err, &le) && errors.Is(context.Cause(ctx), errOpTimeout) {
		// Our own bound ran out (begin), not the caller's deadline: Firestore
		// did not answer in time, an infrastructure timeout.
		return &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: op, Msg: "firestore did not answer within the operation timeout", Err: err}
	}
	return backend.MapError(ctx, op, err, driverError)
}

// driverError maps a client library error once the caller's context is
// known to be live (see classify).
func driverError(err error) *lockstore.Error {
	switch {
	case errors.Is(err, context.Canceled):
		return &lockstore.Error{Code: lockstore.Aborted, Msg: "cancelled", Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &lockstore.Error{Code: lockstore.NetworkTimeout, Msg: "deadline exceeded", Err: err}
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.OK {
		code, known := codeFor(st.Code())
		msg := "firestore " + st.Code().String()
		if !known {
			msg = "unexpected firestore status " + st.Code().String()
		}
		return &lockstore.Error{Code: code, Msg: msg, Err: redact(err, st)}
	}
	return &lockstore.Error{Code: lockstore.Internal, Msg: "unexpected firestore error", Err: err}
}

// redactedError stands in for a status error whose description names a
// document: our document IDs are raw user keys, and an *Error's text must
// never carry one. It unwraps to the original, so status.FromError and
// errors.As still see the status.
type redactedError struct {
	err  error
	code codes.Code
}

func (r *redactedError) Error() string {
	return "rpc error: code = " + r.code.String() + " (description withheld: it names a document)"
}

func (r *redactedError) Unwrap() error { return r.err }

// redact returns err, or a redactedError when st's description contains a
// document path. Descriptions without one are kept: they carry the useful
// part, such as the console link of a missing composite index.
func redact(err error, st *status.Status) error {
	if strings.Contains(st.Message(), "documents/") {
		return &redactedError{err: err, code: st.Code()}
	}
	return err
}
