package storetest

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// acquire takes key for ttl and fails the test unless it succeeded with a
// well-formed lockId, fence and expiry.
func acquire(t *testing.T, st lockstore.Store, key string, ttl time.Duration) lockstore.AcquireResult {
	t.Helper()
	before := nowMs()
	r, err := st.Acquire(ctx(t), key, ttl)
	after := nowMs()
	if err != nil {
		t.Fatalf("Acquire(ttl=%s): unexpected error: %v", ttl, err)
	}
	if !r.OK {
		t.Fatalf("Acquire(ttl=%s): OK=false Reason=%q, want a free key to be acquired", ttl, r.Reason)
	}
	if err := lockstore.ValidateLockID(r.LockID); err != nil {
		t.Fatalf("Acquire: malformed lockId: %v", err)
	}
	if !lockstore.ValidFence(r.Fence) {
		t.Fatalf("Acquire: fence %q is not exactly %d digits", r.Fence, lockstore.FenceDigits)
	}
	if r.Reason != "" {
		t.Errorf("Acquire: OK=true with Reason %q", r.Reason)
	}
	checkExpiry(t, "Acquire", r.ExpiresAtMs, before, after, ttl)
	return r
}

// checkExpiry asserts that an authoritative expiry is now+ttl as seen from
// a clock that agrees with ours within the tolerance (the backends' time
// authorities run on this machine or are this process).
func checkExpiry(t *testing.T, op string, expiresAtMs, beforeMs, afterMs int64, ttl time.Duration) {
	t.Helper()
	lo := beforeMs + ttl.Milliseconds() - lockstore.TimeToleranceMs
	hi := afterMs + ttl.Milliseconds() + lockstore.TimeToleranceMs
	if expiresAtMs < lo || expiresAtMs > hi {
		t.Fatalf("%s: expiresAtMs=%d, want now+%s within the tolerance: [%d, %d]", op, expiresAtMs, ttl, lo, hi)
	}
}

// fenceNum parses a fence the test already knows is well-formed.
func fenceNum(t *testing.T, f string) int64 {
	t.Helper()
	n, err := lockstore.ParseFence(f)
	if err != nil {
		t.Fatalf("fence %q: %v", f, err)
	}
	return n
}

// fence formats n, failing the test if it is out of range.
func fence(t *testing.T, n int64) string {
	t.Helper()
	f, err := lockstore.FormatFence(n)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func isLocked(t *testing.T, st lockstore.Store, key string) bool {
	t.Helper()
	ok, err := st.IsLocked(ctx(t), key)
	if err != nil {
		t.Fatalf("IsLocked: %v", err)
	}
	return ok
}

func wantLocked(t *testing.T, st lockstore.Store, key string, want bool) {
	t.Helper()
	if got := isLocked(t, st, key); got != want {
		t.Fatalf("IsLocked = %v, want %v", got, want)
	}
}

func release(t *testing.T, st lockstore.Store, lockID string) bool {
	t.Helper()
	r, err := st.Release(ctx(t), lockID)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	return r.OK
}

func extend(t *testing.T, st lockstore.Store, lockID string, ttl time.Duration) lockstore.ExtendResult {
	t.Helper()
	r, err := st.Extend(ctx(t), lockID, ttl)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if !r.OK && r.ExpiresAtMs != 0 {
		t.Errorf("Extend: OK=false with ExpiresAtMs=%d, want 0", r.ExpiresAtMs)
	}
	return r
}

func lookupKey(t *testing.T, st lockstore.Store, key string) *lockstore.LockInfo {
	t.Helper()
	li, err := st.LookupKey(ctx(t), key)
	if err != nil {
		t.Fatalf("LookupKey: %v", err)
	}
	return li
}

func lookupID(t *testing.T, st lockstore.Store, lockID string) *lockstore.LockInfo {
	t.Helper()
	li, err := st.LookupLockID(ctx(t), lockID)
	if err != nil {
		t.Fatalf("LookupLockID: %v", err)
	}
	return li
}

func inspect(t *testing.T, st lockstore.Store, key string) lockstore.KeyState {
	t.Helper()
	ks, err := st.Inspect(ctx(t), key)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return ks
}

// wantFree asserts every read path agrees that key is not held and that
// lockID (the last holder's handle, may be "") resolves to nothing.
func wantFree(t *testing.T, st lockstore.Store, key, lockID string) {
	t.Helper()
	wantLocked(t, st, key, false)
	if li := lookupKey(t, st, key); li != nil {
		t.Fatalf("LookupKey = %+v, want nil for a free key", *li)
	}
	if lockID != "" {
		if li := lookupID(t, st, lockID); li != nil {
			t.Fatalf("LookupLockID = %+v, want nil for a released/expired lock", *li)
		}
	}
	if ks := inspect(t, st, key); ks.Live != nil {
		t.Fatalf("Inspect.Live = %+v, want nil for a free key", *ks.Live)
	}
}

// wantInfo asserts li is the sanitised view of the lock r on key.
func wantInfo(t *testing.T, op string, li *lockstore.LockInfo, key string, r lockstore.AcquireResult) {
	t.Helper()
	if li == nil {
		t.Fatalf("%s = nil, want the live lock", op)
	}
	if li.KeyHash != lockstore.HashKey(key) {
		t.Errorf("%s.KeyHash = %q, want HashKey(key) = %q", op, li.KeyHash, lockstore.HashKey(key))
	}
	if li.LockIDHash != lockstore.HashKey(r.LockID) {
		t.Errorf("%s.LockIDHash = %q, want HashKey(lockId) = %q", op, li.LockIDHash, lockstore.HashKey(r.LockID))
	}
	if li.Fence != r.Fence {
		t.Errorf("%s.Fence = %q, want %q", op, li.Fence, r.Fence)
	}
	if li.ExpiresAtMs != r.ExpiresAtMs {
		t.Errorf("%s.ExpiresAtMs = %d, want the acquire's %d", op, li.ExpiresAtMs, r.ExpiresAtMs)
	}
	if li.AcquiredAtMs <= 0 || li.AcquiredAtMs > li.ExpiresAtMs {
		t.Errorf("%s.AcquiredAtMs = %d, want in (0, expiresAtMs=%d]", op, li.AcquiredAtMs, li.ExpiresAtMs)
	}
}

// wantCode asserts err is a lockstore error with the given code.
func wantCode(t *testing.T, what string, err error, code lockstore.Code) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %s", what, code)
		return
	}
	if got := lockstore.CodeOf(err); got != code {
		t.Errorf("%s: code %s (%v), want %s", what, got, err, code)
	}
}
