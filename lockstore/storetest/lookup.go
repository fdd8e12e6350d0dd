package storetest

import (
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// lookupSanitised: both lookups return the same hashed view, whose
// timestamps satisfy expiresAt - acquiredAt = ttl, and nil once released.
func (s *suite) lookupSanitised(t *caseT) {
	st, _ := s.fresh(t)
	const key = "lookup:me"
	r := acquire(t, st, key, 7*time.Second)
	byKey := lookupKey(t, st, key)
	byID := lookupID(t, st, r.LockID)
	wantInfo(t, "LookupKey", byKey, key, r)
	wantInfo(t, "LookupLockID", byID, key, r)
	if *byKey != *byID {
		t.Errorf("LookupKey %+v and LookupLockID %+v disagree", *byKey, *byID)
	}
	if got := byKey.ExpiresAtMs - byKey.AcquiredAtMs; got != 7000 {
		t.Errorf("expiresAtMs - acquiredAtMs = %d, want the ttl 7000", got)
	}
	for _, f := range []string{byKey.KeyHash, byKey.LockIDHash, byKey.Fence} {
		if strings.Contains(f, key) || strings.Contains(f, r.LockID) {
			t.Errorf("lookup leaks a raw key or lockId: %+v", *byKey)
		}
	}
	if li := lookupKey(t, st, "lookup:other"); li != nil {
		t.Errorf("LookupKey of a never-locked key = %+v, want nil", *li)
	}
	release(t, st, r.LockID)
	wantFree(t, st, key, r.LockID)
}

// lookupReadOnly: reads don't move expiry or anything else.
func (s *suite) lookupReadOnly(t *caseT) {
	st, _ := s.fresh(t)
	const key = "readonly"
	r := acquire(t, st, key, 5*time.Second)
	first := lookupKey(t, st, key)
	t.sleep(30 * time.Millisecond)
	for range 3 {
		lookupKey(t, st, key)
		lookupID(t, st, r.LockID)
		isLocked(t, st, key)
		inspect(t, st, key)
	}
	last := lookupKey(t, st, key)
	if *first != *last {
		t.Fatalf("reads changed the lock: before %+v, after %+v", *first, *last)
	}
	wantInfo(t, "LookupKey after reads", last, key, r)
}

// nfcKeys: canonically equivalent spellings name one lock and one counter.
func (s *suite) nfcKeys(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const (
		decomposed = "caf" + "e\u0301"
		composed   = "caf\u00e9"
	)
	r := acquire(t, st, decomposed, 10*time.Second)
	res, err := st.Acquire(ctx(t), composed, 10*time.Second)
	if err != nil || res.OK {
		t.Fatalf("Acquire(NFC spelling) while the NFD spelling is held = %+v, %v; want OK=false", res, err)
	}
	wantLocked(t, st, composed, true)
	li := lookupKey(t, st, composed)
	wantInfo(t, "LookupKey(composed)", li, decomposed, r)
	if li.KeyHash != lockstore.HashKey(composed) {
		t.Errorf("KeyHash %q differs from HashKey(composed) %q", li.KeyHash, lockstore.HashKey(composed))
	}
	release(t, st, r.LockID)
	wantFree(t, st, composed, r.LockID)
	r2 := acquire(t, st, composed, time.Second)
	if got, want := fenceNum(t, r2.Fence), fenceNum(t, r.Fence)+1; got != want {
		t.Errorf("fence of the NFC spelling = %d, want %d (one counter per normalised key)", got, want)
	}
}

// maxKey: keys of exactly 512 bytes after NFC work end to end, including
// one that is longer before normalisation.
func (s *suite) maxKey(t *caseT) {
	st, _ := s.freshConsecutive(t)
	for _, c := range []struct{ name, key string }{
		{"ascii-512", strings.Repeat("k", 512)},
		{"2-byte-512", strings.Repeat("\u00e9", 256)},
		{"nfd-768-nfc-512", strings.Repeat("e\u0301", 256)},
		{"ascii-511-colons", strings.Repeat(":", 511)},
	} {
		t.Logf("key %s", c.name)
		r := acquire(t, st, c.key, 10*time.Second)
		wantLocked(t, st, c.key, true)
		wantInfo(t, "LookupKey("+c.name+")", lookupKey(t, st, c.key), c.key, r)
		if ks := inspect(t, st, c.key); ks.Live == nil || ks.LatestFence != r.Fence {
			t.Errorf("%s: Inspect = %+v, want the live lock with fence %s", c.name, ks, r.Fence)
		}
		if !release(t, st, r.LockID) {
			t.Fatalf("%s: Release OK=false", c.name)
		}
		wantFree(t, st, c.key, r.LockID)
	}
	// Two long keys sharing a 511-byte prefix are distinct locks, even on
	// backends that hash long storage keys.
	a := acquire(t, st, strings.Repeat("x", 511)+"a", 10*time.Second)
	b := acquire(t, st, strings.Repeat("x", 511)+"b", 10*time.Second)
	if a.Fence != fence(t, 1) || b.Fence != fence(t, 1) {
		t.Errorf("long keys with a shared prefix share state: fences %s, %s", a.Fence, b.Fence)
	}
}

// inspect: Inspect reports the live lock and the latest fence ever issued,
// which outlives the lock.
func (s *suite) inspect(t *caseT) {
	st, _ := s.fresh(t)
	const key = "inspect"
	before := t.nowMs()
	ks := inspect(t, st, key)
	if ks.Live != nil || ks.LatestFence != "" {
		t.Fatalf("Inspect of a never-locked key = %+v, want no live lock and LatestFence \"\"", ks)
	}
	if ks.NowMs < before-lockstore.TimeToleranceMs || ks.NowMs > t.nowMs()+lockstore.TimeToleranceMs {
		t.Errorf("Inspect.NowMs = %d, want about %d", ks.NowMs, before)
	}

	r1 := acquire(t, st, key, 10*time.Second)
	ks = inspect(t, st, key)
	if ks.Live == nil {
		t.Fatal("Inspect.Live = nil while held")
	}
	if ks.Live.LockID != r1.LockID || ks.Live.Fence != r1.Fence || ks.Live.ExpiresAtMs != r1.ExpiresAtMs {
		t.Errorf("Inspect.Live = {fence %s exp %d, lockId match %v}, want the acquire's {fence %s exp %d}",
			ks.Live.Fence, ks.Live.ExpiresAtMs, ks.Live.LockID == r1.LockID, r1.Fence, r1.ExpiresAtMs)
	}
	if ks.Live.Key != key {
		t.Errorf("Inspect.Live.Key = %q, want the key %q", ks.Live.Key, key)
	}
	if ks.Live.AcquiredAtMs != r1.ExpiresAtMs-10_000 {
		t.Errorf("Inspect.Live.AcquiredAtMs = %d, want %d", ks.Live.AcquiredAtMs, r1.ExpiresAtMs-10_000)
	}
	if ks.LatestFence != r1.Fence {
		t.Errorf("Inspect.LatestFence = %q while held, want the live fence %q", ks.LatestFence, r1.Fence)
	}

	release(t, st, r1.LockID)
	ks = inspect(t, st, key)
	if ks.Live != nil {
		t.Errorf("Inspect.Live after release = %+v, want nil", *ks.Live)
	}
	if ks.LatestFence != r1.Fence {
		t.Errorf("Inspect.LatestFence after release = %q, want %q (it outlives the lock)", ks.LatestFence, r1.Fence)
	}

	r2 := acquire(t, st, key, 10*time.Second)
	release(t, st, r2.LockID)
	if ks := inspect(t, st, key); ks.LatestFence != r2.Fence || r2.Fence <= r1.Fence {
		t.Errorf("Inspect.LatestFence after a newer acquire = %q, want the newer %q (> %q)", ks.LatestFence, r2.Fence, r1.Fence)
	}
}
