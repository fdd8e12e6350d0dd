package lockstore

import (
	"strings"
	"testing"
)

func TestNewLockInfo(t *testing.T) {
	li := NewLockInfo("resource:123", "AAAAAAAAAAAAAAAAAAAAAA", "000000000000007", 2000, 1000)
	want := LockInfo{KeyHash: "e90a28c676a29a3291e2874a", LockIDHash: HashKey("AAAAAAAAAAAAAAAAAAAAAA"),
		Fence: "000000000000007", ExpiresAtMs: 2000, AcquiredAtMs: 1000}
	if *li != want {
		t.Fatalf("NewLockInfo = %+v, want %+v", *li, want)
	}
	if strings.Contains(li.KeyHash+li.LockIDHash, "resource") {
		t.Fatalf("NewLockInfo leaks the raw key: %+v", *li)
	}
}
