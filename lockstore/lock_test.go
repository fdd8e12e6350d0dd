package lockstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

var testLock = Lock{Key: "resource:123", LockID: "AAAAAAAAAAAAAAAAAAAAAA", Fence: "000000000000007", ExpiresAtMs: 2000, AcquiredAtMs: 1000}

// TestLockInfo: the sanitised view hashes the key (SyncGuard's hashKey
// vector) and the lockId, and keeps the rest.
func TestLockInfo(t *testing.T) {
	li := testLock.Info()
	want := LockInfo{KeyHash: "e90a28c676a29a3291e2874a", LockIDHash: HashKey("AAAAAAAAAAAAAAAAAAAAAA"),
		Fence: "000000000000007", ExpiresAtMs: 2000, AcquiredAtMs: 1000}
	if *li != want {
		t.Fatalf("Info = %+v, want %+v", *li, want)
	}
	if got := testLock.Listed(); got != (ListedLock{Key: "resource:123", LockInfo: want}) {
		t.Fatalf("Listed = %+v, want the view and the key", got)
	}
}

// leaks reports whether the output of logging v holds l's raw lockId or
// key.
func leaks(l Lock, v any) (string, bool) {
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "lock", v)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "lock", v)
	out := buf.String()
	return out, strings.Contains(out, l.LockID) || strings.Contains(out, l.Key)
}

// TestLockLogsSanitised: a Lock handed to slog (JSON or text) logs its
// view, never the raw key or lockId; the check catches a lock type without
// LogValue (the broken variant: the struct's fields logged as they are).
func TestLockLogsSanitised(t *testing.T) {
	if out, leaked := leaks(testLock, testLock); leaked || !strings.Contains(out, testLock.Info().KeyHash) {
		t.Errorf("logging a Lock: %s", out)
	}
	if out, leaked := leaks(testLock, &testLock); leaked {
		t.Errorf("logging a *Lock: %s", out)
	}
	type rawLock Lock // the same fields without the LogValue method
	if out, leaked := leaks(testLock, rawLock(testLock)); !leaked {
		t.Errorf("the leak check missed a raw lock: %s", out)
	}
	if s := fmt.Sprint(testLock.Info()); strings.Contains(s, testLock.LockID) {
		t.Errorf("Info prints the lockId: %s", s)
	}
}

// TestLockInfoJSON: the view's JSON is the lookup answer of docs/api.md,
// byte for byte (names, order), and names neither the key nor the lockId.
func TestLockInfoJSON(t *testing.T) {
	b, err := json.Marshal(testLock.Info())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"keyHash":"e90a28c676a29a3291e2874a","lockIdHash":"` + HashKey(testLock.LockID) +
		`","fence":"000000000000007","expiresAtMs":2000,"acquiredAtMs":1000}`
	if string(b) != want {
		t.Errorf("json(Info) = %s\nwant        %s", b, want)
	}
}
