package lockstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Code classifies a system failure. Callers branch on the code, never on an
// error's text.
type Code string

// The error codes of the lock contract (docs/design.md). Contention is not an
// error: it is an AcquireResult with Reason "locked".
const (
	ServiceUnavailable Code = "ServiceUnavailable" // backend unreachable, connection refused/reset, transaction conflict
	AuthFailed         Code = "AuthFailed"         // backend (or gateway) refused the credentials
	InvalidArgument    Code = "InvalidArgument"    // bad key, lockId, TTL or configuration
	RateLimited        Code = "RateLimited"        // backend throttled the call
	NetworkTimeout     Code = "NetworkTimeout"     // a deadline expired talking to the backend
	AcquisitionTimeout Code = "AcquisitionTimeout" // the Lock helper's retry loop ran out of time
	Aborted            Code = "Aborted"            // the caller cancelled the context
	Internal           Code = "Internal"           // anything unexpected, including fence overflow
)

// Codes lists every Code, in a stable order (for metrics and docs).
var Codes = []Code{ServiceUnavailable, AuthFailed, InvalidArgument, RateLimited,
	NetworkTimeout, AcquisitionTimeout, Aborted, Internal}

// Error is the typed system failure of every lockstore operation.
//
// Key and LockID carry context for the caller's own use (e.g. an
// onReleaseError callback). Error() never prints them raw: it prints their
// hashKey values, so an error that reaches a log line leaks no secret.
type Error struct {
	Code Code
	// BadInput marks an InvalidArgument that refuses the caller's own input
	// (a key, lockId, TTL, write id or maxWrite that fails validation, or a
	// key the backend cannot store), set only by BadInputf. Other
	// InvalidArguments (a missing Firestore index, a misconfigured server,
	// a bad option) are deployment or programming faults: the edge answers
	// bad input 400 and fails closed (503) on the rest. See IsBadInput.
	BadInput bool
	Op       string // the operation, e.g. "acquire"
	Msg      string // what went wrong, free of raw keys and lockIds
	Key      string // raw user key, if known; never printed
	LockID   string // raw lockId, if known; never printed
	Err      error  // the underlying cause, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("lockstore: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(string(e.Code))
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Key != "" {
		b.WriteString(" (keyHash=")
		b.WriteString(HashKey(e.Key))
		b.WriteString(")")
	}
	if e.LockID != "" {
		b.WriteString(" (lockIdHash=")
		b.WriteString(HashKey(e.LockID))
		b.WriteString(")")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is lets errors.Is(err, &Error{Code: X}) match any *Error with code X.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Op == "" && t.Msg == "" && t.Err == nil
}

// Errorf builds an *Error with a formatted message. The message must not
// contain raw keys or lockIds; put those in the Key/LockID fields instead.
func Errorf(code Code, op, format string, args ...any) *Error {
	return &Error{Code: code, Op: op, Msg: fmt.Sprintf(format, args...)}
}

// BadInputf builds the InvalidArgument that refuses a caller's input
// (BadInput set, Op "validate"). The message must not contain raw keys or
// lockIds.
func BadInputf(format string, args ...any) *Error {
	return &Error{Code: InvalidArgument, BadInput: true, Op: "validate", Msg: fmt.Sprintf(format, args...)}
}

// IsBadInput reports whether err's chain holds an *Error refusing the
// caller's input (BadInputf): the request is wrong, the store is not.
func IsBadInput(err error) bool {
	var le *Error
	return errors.As(err, &le) && le.Code == InvalidArgument && le.BadInput
}

// CodeOf returns the Code of err: the code of the first *Error in its chain,
// Aborted or NetworkTimeout for bare context errors, Internal for anything
// else, and "" for a nil error.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var le *Error
	if errors.As(err, &le) {
		return le.Code
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Aborted
	case errors.Is(err, context.DeadlineExceeded):
		return NetworkTimeout
	}
	return Internal
}

// ContextError maps a context's error to the contract: cancellation is
// Aborted, an expired deadline is NetworkTimeout. It returns nil when ctx is
// still live. Backends call it before I/O and when I/O fails, so that a
// driver's own wording of "context canceled" never decides the code.
func ContextError(ctx context.Context, op string) *Error {
	switch err := ctx.Err(); {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: NetworkTimeout, Op: op, Msg: "deadline exceeded", Err: err}
	default:
		return &Error{Code: Aborted, Op: op, Msg: "cancelled", Err: err}
	}
}

// WithKeyLockID attaches the raw key and lockId an operation concerned to the
// first *Error in err's chain (fields already set are kept), for callers
// such as an onReleaseError callback; Error() still prints only their
// hashes. Any other error is returned unchanged.
func WithKeyLockID(err error, key, lockID string) error {
	var le *Error
	if !errors.As(err, &le) {
		return err
	}
	c := *le
	if c.Key == "" {
		c.Key = key
	}
	if c.LockID == "" {
		c.LockID = lockID
	}
	return &c
}
