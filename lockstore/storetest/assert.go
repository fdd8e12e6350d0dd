package storetest

import (
	"time"

	"context"
	"github.com/fencegate/fencegate/lockstore"
)

// acquire takes key for ttl and fails the test unless it succeeded with a
// well-formed lockId, fence and expiry.
func acquire(t *caseT, st lockstore.Store, key string, ttl time.Duration) lockstore.AcquireResult {
	t.Helper()
	before := t.nowMs()
	r, err := st.Acquire(ctx(t), key, ttl)
	after := t.nowMs()
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
func checkExpiry(t *caseT, op string, expiresAtMs, beforeMs, afterMs int64, ttl time.Duration) {
	t.Helper()
	lo := beforeMs + ttl.Milliseconds() - lockstore.TimeToleranceMs
	hi := afterMs + ttl.Milliseconds() + lockstore.TimeToleranceMs
	if expiresAtMs < lo || expiresAtMs > hi {
		t.Fatalf("%s: expiresAtMs=%d, want now+%s within the tolerance: [%d, %d]", op, expiresAtMs, ttl, lo, hi)
	}
}

// fenceNum parses a fence the test already knows is well-formed.
func fenceNum(t *caseT, f string) int64 {
	t.Helper()
	n, err := lockstore.ParseFence(f)
	if err != nil {
		t.Fatalf("fence %q: %v", f, err)
	}
	return n
}

// fence formats n, failing the test if it is out of range.
func fence(t *caseT, n int64) string {
	t.Helper()
	f, err := lockstore.FormatFence(n)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func isLocked(t *caseT, st lockstore.Store, key string) bool {
	t.Helper()
	ok, err := st.IsLocked(ctx(t), key)
	if err != nil {
		t.Fatalf("IsLocked: %v", err)
	}
	return ok
}

func wantLocked(t *caseT, st lockstore.Store, key string, want bool) {
	t.Helper()
	if got := isLocked(t, st, key); got != want {
		t.Fatalf("IsLocked = %v, want %v", got, want)
	}
}

func release(t *caseT, st lockstore.Store, lockID string) bool {
	t.Helper()
	r, err := st.Release(ctx(t), lockID)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	return r.OK
}

func extend(t *caseT, st lockstore.Store, lockID string, ttl time.Duration) lockstore.ExtendResult {
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

func lookupKey(t *caseT, st lockstore.Store, key string) *lockstore.LockInfo {
	t.Helper()
	li, err := st.LookupKey(ctx(t), key)
	if err != nil {
		t.Fatalf("LookupKey: %v", err)
	}
	return li
}

func lookupID(t *caseT, st lockstore.Store, lockID string) *lockstore.LockInfo {
	t.Helper()
	li, err := st.LookupLockID(ctx(t), lockID)
	if err != nil {
		t.Fatalf("LookupLockID: %v", err)
	}
	return li
}

func inspect(t *caseT, st lockstore.Store, key string) lockstore.KeyState {
	t.Helper()
	ks, err := st.Inspect(ctx(t), key)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return ks
}

// wantFree asserts every read path agrees that key is not held and that
// lockID (the last holder's handle, may be "") resolves to nothing.
func wantFree(t *caseT, st lockstore.Store, key, lockID string) {
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
func wantInfo(t *caseT, op string, li *lockstore.LockInfo, key string, r lockstore.AcquireResult) {
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
func wantCode(t *caseT, what string, err error, code lockstore.Code) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %s", what, code)
		return
	}
	if got := lockstore.CodeOf(err); got != code {
		t.Errorf("%s: code %s (%v), want %s", what, got, err, code)
	}
}

// ---- the write barrier ----

// mustRelease releases a lock the case holds.
func mustRelease(t *caseT, st lockstore.Store, lockID string) {
	t.Helper()
	if !release(t, st, lockID) {
		t.Fatalf("Release of a held lock: OK=false")
	}
}

// handover releases the live lock r and acquires key again: the new
// holder's fence must be r's plus one.
func handover(t *caseT, st lockstore.Store, key string, r lockstore.AcquireResult) lockstore.AcquireResult {
	t.Helper()
	mustRelease(t, st, r.LockID)
	n := acquire(t, st, key, time.Minute)
	if n.Fence != fence(t, fenceNum(t, r.Fence)+1) {
		t.Fatalf("fence after handover = %s, want %s + 1", n.Fence, r.Fence)
	}
	return n
}

func writeID(t *caseT) string {
	t.Helper()
	id, err := lockstore.NewLockID()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return id
}

// adm is an admission with a fresh write id.
func adm(t *caseT, fence string, requireLive bool, maxWrite time.Duration) lockstore.WriteAdmission {
	return lockstore.WriteAdmission{Fence: fence, RequireLive: requireLive, WriteID: writeID(t), MaxWrite: maxWrite}
}

// admitFresh admits a write with a fresh id, for goroutines other than the
// case's own (which must not call Fatalf).
func admitFresh(ctx context.Context, st lockstore.Store, key, fence string, requireLive bool) (lockstore.WriteAdmitResult, string, error) {
	id, err := lockstore.NewLockID()
	if err != nil {
		return lockstore.WriteAdmitResult{}, "", err
	}
	r, err := st.Admit(ctx, key, lockstore.WriteAdmission{Fence: fence, RequireLive: requireLive, WriteID: id, MaxWrite: time.Minute})
	return r, id, err
}

func admit(t *caseT, st lockstore.Store, key string, a lockstore.WriteAdmission) lockstore.WriteAdmitResult {
	t.Helper()
	r, err := st.Admit(ctx(t), key, a)
	if err != nil {
		t.Fatalf("Admit(fence %s, requireLive %v): %v", a.Fence, a.RequireLive, err)
	}
	if r.Admitted && r.Full {
		t.Errorf("Admit: Admitted and Full at once")
	}
	if r.Admitted && (r.Blocking != 0 || r.BlockedUntilMs != 0) {
		t.Errorf("Admit: Admitted with Blocking=%d BlockedUntilMs=%d, want 0 and 0", r.Blocking, r.BlockedUntilMs)
	}
	if r.Blocking == 0 && r.BlockedUntilMs != 0 {
		t.Errorf("Admit: Blocking=0 with BlockedUntilMs=%d, want 0", r.BlockedUntilMs)
	}
	if r.Blocking > 0 && r.BlockedUntilMs <= r.State.NowMs {
		t.Errorf("Admit: Blocking=%d with BlockedUntilMs=%d not after the store's now %d (expired entries must not block)",
			r.Blocking, r.BlockedUntilMs, r.State.NowMs)
	}
	return r
}

// wantAdmitted asserts the admission was registered.
func wantAdmitted(t *caseT, what string, r lockstore.WriteAdmitResult) {
	t.Helper()
	if !r.Admitted {
		t.Fatalf("%s: Admitted=false (Blocking=%d, state live=%v latest=%q), want admitted",
			what, r.Blocking, liveFence(r.State), r.State.LatestFence)
	}
}

// wantRefused asserts the admission was refused with `blocking` blocking
// entries (0: the fence did not match).
func wantRefused(t *caseT, what string, r lockstore.WriteAdmitResult, blocking int) {
	t.Helper()
	if r.Admitted {
		t.Fatalf("%s: Admitted=true (state live=%v latest=%q), want refused with Blocking=%d",
			what, liveFence(r.State), r.State.LatestFence, blocking)
	}
	if r.Blocking != blocking {
		t.Fatalf("%s: Blocking=%d, want %d", what, r.Blocking, blocking)
	}
	if r.Full {
		t.Fatalf("%s: Full=true, want refused for the fence or older writes", what)
	}
}

func liveFence(ks lockstore.KeyState) string {
	if ks.Live == nil {
		return "none"
	}
	return ks.Live.Fence
}

func finish(t *caseT, st lockstore.Store, key, id string) {
	t.Helper()
	if err := st.Finish(ctx(t), key, id); err != nil {
		t.Fatalf("Finish: %v", err)
	}
}

// wantSameState asserts an Admit's state is what Inspect reads.
func wantSameState(t *caseT, what string, got, want lockstore.KeyState) {
	t.Helper()
	if got.LatestFence != want.LatestFence {
		t.Errorf("%s: State.LatestFence = %q, Inspect says %q", what, got.LatestFence, want.LatestFence)
	}
	switch {
	case (got.Live == nil) != (want.Live == nil):
		t.Errorf("%s: State.Live = %v, Inspect.Live = %v", what, got.Live, want.Live)
	case got.Live != nil && *got.Live != *want.Live:
		t.Errorf("%s: State.Live differs from Inspect's (fence %s vs %s, expiresAtMs %d vs %d)", what,
			got.Live.Fence, want.Live.Fence, got.Live.ExpiresAtMs, want.Live.ExpiresAtMs)
	}
	if d := got.NowMs - want.NowMs; d > 0 || d < -opTimeout.Milliseconds() {
		t.Errorf("%s: State.NowMs = %d, Inspect's later NowMs = %d", what, got.NowMs, want.NowMs)
	}
}

// checkDeadline asserts BlockedUntilMs is admission time + maxWrite by a
// clock that agrees with ours within the tolerance.
func checkDeadline(t *caseT, what string, gotMs, beforeMs, afterMs int64, maxWrite time.Duration) {
	t.Helper()
	lo := beforeMs + maxWrite.Milliseconds() - lockstore.TimeToleranceMs
	hi := afterMs + maxWrite.Milliseconds() + lockstore.TimeToleranceMs
	if gotMs < lo || gotMs > hi {
		t.Fatalf("%s: BlockedUntilMs=%d, want admission time + %s within the tolerance: [%d, %d]", what, gotMs, maxWrite, lo, hi)
	}
}
