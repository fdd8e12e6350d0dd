package backend

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// The prechecks every Store operation runs before any I/O (the Store
// contract): its arguments are validated first, so a bad key, lockId or
// TTL is InvalidArgument whatever the context, and then a context that is
// already done fails the call with ContextError (Aborted or
// NetworkTimeout). Backends add their own checks (a closed store, derived
// storage keys) after them.

// PrecheckKey is the precheck of operation op on a user key. It returns the
// NFC-normalised key.
func PrecheckKey(ctx context.Context, op, key string) (string, error) {
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		return "", err
	}
	if err := lockstore.ContextError(ctx, op); err != nil {
		return "", err
	}
	return nk, nil
}

// PrecheckLockID is the precheck of operation op on a lockId.
func PrecheckLockID(ctx context.Context, op, lockID string) error {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return err
	}
	if err := lockstore.ContextError(ctx, op); err != nil {
		return err
	}
	return nil
}

// PrecheckAcquire is Acquire's precheck. It returns the NFC-normalised key and
// the TTL in milliseconds.
func PrecheckAcquire(ctx context.Context, key string, ttl time.Duration) (string, int64, error) {
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		return "", 0, err
	}
	ttlMs, err := lockstore.ValidateTTL(ttl)
	if err != nil {
		return "", 0, err
	}
	if err := lockstore.ContextError(ctx, "acquire"); err != nil {
		return "", 0, err
	}
	return nk, ttlMs, nil
}

// PrecheckExtend is Extend's precheck. It returns the TTL in milliseconds.
func PrecheckExtend(ctx context.Context, lockID string, ttl time.Duration) (int64, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return 0, err
	}
	ttlMs, err := lockstore.ValidateTTL(ttl)
	if err != nil {
		return 0, err
	}
	if err := lockstore.ContextError(ctx, "extend"); err != nil {
		return 0, err
	}
	return ttlMs, nil
}

// PrecheckAdmit starts a write-barrier Admit: the key and the admission
// (fence, write id, maxWrite) are validated, then ctx, before any I/O. It
// returns the normalised key and MaxWrite in milliseconds.
func PrecheckAdmit(ctx context.Context, key string, a lockstore.WriteAdmission) (string, int64, error) {
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		return "", 0, err
	}
	maxMs, err := ValidateAdmission(a)
	if err != nil {
		return "", 0, err
	}
	if err := lockstore.ContextError(ctx, "admit"); err != nil {
		return "", 0, err
	}
	return nk, maxMs, nil
}

// PrecheckFinish starts a write-barrier Finish: the key and write id are
// validated, then ctx, before any I/O. It returns the normalised key.
func PrecheckFinish(ctx context.Context, key, writeID string) (string, error) {
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		return "", err
	}
	if err := ValidateWriteID(writeID); err != nil {
		return "", err
	}
	if err := lockstore.ContextError(ctx, "finish"); err != nil {
		return "", err
	}
	return nk, nil
}
