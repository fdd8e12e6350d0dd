package lockstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestErrorNeverPrintsSecrets(t *testing.T) {
	const key = "tenant-42/invoice:secret-key"
	const id = "Zm9vYmFyYmF6cXV4MTIzNA"
	var errs []error
	errs = append(errs,
		&Error{Code: ServiceUnavailable, Op: "acquire", Msg: "down", Key: key, LockID: id, Err: errors.New("dial tcp: refused")},
		WithKeyLockID(fmt.Errorf("wrapped: %w", &Error{Code: Internal, Op: "release"}), key, id),
		ValidateLockID(id+"!"),
		ValidateLockID(id[:21]+"+"),
	)
	_, err := NormalizeKey(strings.Repeat(key, 40))
	errs = append(errs, err)
	// MakeStorageKey's: backend.TestStorageKeyErrorNeverPrintsKey.
	// As package lock's AcquireWithRetry builds it (its own test checks it
	// does).
	errs = append(errs, &Error{Code: AcquisitionTimeout, Op: "acquire", Key: key, Msg: "not acquired"})
	for i, e := range errs {
		if e == nil {
			t.Fatalf("case %d: no error", i)
		}
		msg := e.Error()
		if strings.Contains(msg, key) || strings.Contains(msg, id) || strings.Contains(msg, "secret-key") {
			t.Errorf("case %d leaks a raw key or lockId: %s", i, msg)
		}
	}
	// The hashes are printed instead, so the error is still traceable.
	if msg := errs[0].Error(); !strings.Contains(msg, HashKey(key)) || !strings.Contains(msg, HashKey(id)) {
		t.Errorf("hashes missing from %q", msg)
	}
	// The raw values stay available to code.
	var le *Error
	if !errors.As(errs[len(errs)-1], &le) || le.Key != key || le.Code != AcquisitionTimeout {
		t.Errorf("AcquisitionTimeout error lost its key context: %#v", le)
	}
}

func TestCodeOf(t *testing.T) {
	base := &Error{Code: RateLimited, Op: "acquire"}
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"nil", nil, ""},
		{"bare", base, RateLimited},
		{"wrapped", fmt.Errorf("calling backend: %w", base), RateLimited},
		{"double wrapped", fmt.Errorf("a: %w", fmt.Errorf("b: %w", base)), RateLimited},
		{"joined", errors.Join(errors.New("x"), base), RateLimited},
		{"outer *Error wins over its cause", &Error{Code: ServiceUnavailable, Err: context.Canceled}, ServiceUnavailable},
		{"canceled", context.Canceled, Aborted},
		{"deadline", context.DeadlineExceeded, NetworkTimeout},
		{"wrapped canceled", fmt.Errorf("redis: %w", context.Canceled), Aborted},
		{"wrapped deadline", fmt.Errorf("pgx: %w", context.DeadlineExceeded), NetworkTimeout},
		{"plain", errors.New("boom"), Internal},
	}
	for _, tt := range tests {
		if got := CodeOf(tt.err); got != tt.want {
			t.Errorf("%s: CodeOf = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("wrap: %w", &Error{Code: Aborted, Op: "acquire", Msg: "cancelled", Err: context.Canceled})
	if !errors.Is(err, &Error{Code: Aborted}) {
		t.Error("errors.Is by code failed")
	}
	if errors.Is(err, &Error{Code: Internal}) {
		t.Error("errors.Is matched another code")
	}
	if errors.Is(err, &Error{Code: Aborted, Op: "release"}) {
		t.Error("a target with an Op must not match by code alone")
	}
	if !errors.Is(err, context.Canceled) {
		t.Error("cause not reachable through Unwrap")
	}
}

func TestContextError(t *testing.T) {
	if ContextError(context.Background(), "x") != nil {
		t.Error("live context produced an error")
	}
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if e := ContextError(c, "acquire"); e == nil || e.Code != Aborted || e.Op != "acquire" || !errors.Is(e, context.Canceled) {
		t.Errorf("cancelled: %v", e)
	}
	d, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()
	if e := ContextError(d, "extend"); e == nil || e.Code != NetworkTimeout || !errors.Is(e, context.DeadlineExceeded) {
		t.Errorf("deadline: %v", e)
	}
}

func TestCodesComplete(t *testing.T) {
	seen := map[Code]bool{}
	for _, c := range Codes {
		if seen[c] || c == "" {
			t.Errorf("duplicate or empty code %q", c)
		}
		seen[c] = true
	}
	if len(seen) != 8 {
		t.Errorf("%d codes, want the contract's 8", len(seen))
	}
}

func TestWithKeyLockID(t *testing.T) {
	inner := &Error{Code: ServiceUnavailable, Op: "release", LockID: "kept-lock-id-000000000"}
	err := WithKeyLockID(fmt.Errorf("op: %w", inner), "k", "other-lock-id-00000000")
	var le *Error
	if !errors.As(err, &le) || le.Key != "k" || le.LockID != "kept-lock-id-000000000" || le.Code != ServiceUnavailable {
		t.Fatalf("WithKeyLockID = %#v", le)
	}
	if inner.Key != "" {
		t.Fatal("WithKeyLockID changed the original error")
	}
	plain := errors.New("plain")
	if WithKeyLockID(plain, "k", "") != plain {
		t.Fatal("a non-lockstore error must come back unchanged")
	}
	if WithKeyLockID(nil, "k", "") != nil {
		t.Fatal("nil must stay nil")
	}
}

// TestIsBadInput: every validator (the backend kit's: backend.TestKitIsBadInput)'s refusal carries the property, through
// wrapping and WithKeyLockID; an InvalidArgument built otherwise (a deployment
// fault, whatever its Op) and other codes do not.
func TestIsBadInput(t *testing.T) {
	_, keyErr := NormalizeKey("")
	_, ttlErr := ValidateTTL(-time.Second)
	for name, err := range map[string]error{
		"key":     keyErr,
		"lockId":  ValidateLockID("short"),
		"ttl":     ttlErr,
		"wrapped": fmt.Errorf("outer: %w", BadInputf("x")),
		"context": WithKeyLockID(BadInputf("x"), "k", ""),
	} {
		if !IsBadInput(err) {
			t.Errorf("%s: IsBadInput(%v) = false", name, err)
		}
	}
	for name, err := range map[string]error{
		"nil":          nil,
		"fault":        Errorf(InvalidArgument, "inspect", "index missing"),
		"validate-op":  Errorf(InvalidArgument, "validate", "not built by BadInputf"),
		"other code":   &Error{Code: ServiceUnavailable, BadInput: true},
		"plain":        errors.New("x"),
		"context done": context.Canceled,
	} {
		if IsBadInput(err) {
			t.Errorf("%s: IsBadInput(%v) = true", name, err)
		}
	}
}
