package backend

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fencegate/fencegate/lockstore"
	"golang.org/x/text/unicode/norm"
)

func TestMakeStorageKey(t *testing.T) {
	const sg = "syncguard"
	// Under the Redis limit 1000 with reserve 26, "syncguard:" + key fits
	// while the key is at most 1000-26-10 = 964 bytes.
	fit := strings.Repeat("k", 964)
	over := strings.Repeat("k", 965)
	eAcute := "\u00e9"   // 2 bytes composed
	eDecomp := "e\u0301" // 3 bytes decomposed, 2 after NFC
	qa := "\u0958"       // 3 bytes; NFC decomposes it (composition exclusion) to 6
	prefix951 := strings.Repeat("p", 951)
	prefix952 := strings.Repeat("p", 952)
	tests := []struct {
		name           string
		prefix, key    string
		limit, reserve int
		want           string
		wantErr        bool
	}{
		{"pinned vector", sg, strings.Repeat("a", 1000), RedisKeyLimit, RedisKeyReserve, "syncguard:ExGABeFY_ptg92cjc9Lb_g", false},
		{"short key", sg, "resource:123", RedisKeyLimit, RedisKeyReserve, "syncguard:resource:123", false},
		{"exactly at limit-reserve", sg, fit, RedisKeyLimit, RedisKeyReserve, sg + ":" + fit, false},
		{"one byte over", sg, over, RedisKeyLimit, RedisKeyReserve, hashed(sg, over), false},
		{"reserve 0 lets 26 more bytes in", sg, strings.Repeat("k", 990), RedisKeyLimit, 0, sg + ":" + strings.Repeat("k", 990), false},
		{"reserve 0, one over", sg, strings.Repeat("k", 991), RedisKeyLimit, 0, hashed(sg, strings.Repeat("k", 991)), false},
		{"postgres limit", sg, strings.Repeat("k", 1690), PostgresKeyLimit, 0, sg + ":" + strings.Repeat("k", 1690), false},
		{"firestore limit, over", sg, strings.Repeat("k", 1491), FirestoreKeyLimit, 0, hashed(sg, strings.Repeat("k", 1491)), false},
		{"trailing colon stripped", sg + ":", "x", RedisKeyLimit, RedisKeyReserve, "syncguard:x", false},
		{"trailing colons stripped", sg + ":::", "x", RedisKeyLimit, RedisKeyReserve, "syncguard:x", false},
		{"colon-only prefix is empty", ":", "x", RedisKeyLimit, RedisKeyReserve, "x", false},
		{"empty prefix", "", "resource:123", RedisKeyLimit, RedisKeyReserve, "resource:123", false},
		{"empty prefix at limit", "", strings.Repeat("k", 974), RedisKeyLimit, RedisKeyReserve, strings.Repeat("k", 974), false},
		{"empty prefix over", "", strings.Repeat("k", 975), RedisKeyLimit, RedisKeyReserve, hashed("", strings.Repeat("k", 975)), false},
		{"multi-byte at boundary fits", sg, strings.Repeat("k", 962) + eAcute, RedisKeyLimit, RedisKeyReserve, sg + ":" + strings.Repeat("k", 962) + eAcute, false},
		{"multi-byte straddles boundary", sg, strings.Repeat("k", 963) + eAcute, RedisKeyLimit, RedisKeyReserve, hashed(sg, strings.Repeat("k", 963)+eAcute), false},
		{"decomposed fits after NFC", sg, strings.Repeat("k", 962) + eDecomp, RedisKeyLimit, RedisKeyReserve, sg + ":" + strings.Repeat("k", 962) + eAcute, false},
		{"NFC growth pushes over", sg, strings.Repeat("k", 961) + qa, RedisKeyLimit, RedisKeyReserve, hashed(sg, norm.NFC.String(strings.Repeat("k", 961)+qa)), false},
		{"longest prefix that still hashes", prefix951, "long" + over, RedisKeyLimit, RedisKeyReserve, hashed(prefix951, "long"+over), false},
		{"prefix too long even hashed", prefix952, "long" + over, RedisKeyLimit, RedisKeyReserve, "", true},
		{"prefix 952 with a key that fits", prefix952, "k", RedisKeyLimit, RedisKeyReserve, prefix952 + ":k", false},
		{"prefix leaves no room", strings.Repeat("p", 974), "k", RedisKeyLimit, RedisKeyReserve, "", true},
		{"prefix exactly fills limit", strings.Repeat("p", 973), "", RedisKeyLimit, RedisKeyReserve, strings.Repeat("p", 973) + ":", false},
		{"empty prefix, limit fits only the hash", "", strings.Repeat("k", 30), 40, 18, hashed("", strings.Repeat("k", 30)), false},
		{"empty prefix, limit below the hash", "", strings.Repeat("k", 30), 40, 19, "", true},
		{"reserve above limit", "", "k", 10, 11, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MakeStorageKey(tt.prefix, tt.key, tt.limit, tt.reserve)
			if tt.wantErr {
				if lockstore.CodeOf(err) != lockstore.InvalidArgument {
					t.Fatalf("got (%q, %v), want an InvalidArgument error", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", trunc(got), trunc(tt.want))
			}
			if len(got) > tt.limit-tt.reserve {
				t.Errorf("len %d > limit-reserve %d", len(got), tt.limit-tt.reserve)
			}
		})
	}
}

func TestMakeStorageKeyNFCEquivalence(t *testing.T) {
	for _, n := range []int{1, 500, 962, 963, 2000} {
		pad := strings.Repeat("x", n)
		a, errA := MakeStorageKey("syncguard", pad+"\u00e9", RedisKeyLimit, RedisKeyReserve)
		b, errB := MakeStorageKey("syncguard", pad+"e\u0301", RedisKeyLimit, RedisKeyReserve)
		if errA != nil || errB != nil || a != b {
			t.Errorf("pad %d: composed %q (%v) != decomposed %q (%v)", n, trunc(a), errA, trunc(b), errB)
		}
	}
}

func TestFenceStorageKey(t *testing.T) {
	const sg = "syncguard"
	base, err := MakeStorageKey(sg, "resource:123", RedisKeyLimit, RedisKeyReserve)
	if err != nil {
		t.Fatal(err)
	}
	// Two steps: the counter is keyed by the lock's *storage* key, which is
	// SyncGuard's syncguard:fence:<lockKey> layout.
	got, err := FenceStorageKey(sg, base, RedisKeyLimit, RedisKeyReserve)
	if err != nil || got != "syncguard:fence:syncguard:resource:123" {
		t.Errorf("FenceStorageKey = %q, %v", got, err)
	}
	// A lock key already hashed: the fence key stays short and unhashed.
	long := strings.Repeat("a", 1000)
	hb, _ := MakeStorageKey(sg, long, RedisKeyLimit, RedisKeyReserve)
	got, err = FenceStorageKey(sg, hb, RedisKeyLimit, RedisKeyReserve)
	if err != nil || got != "syncguard:fence:syncguard:ExGABeFY_ptg92cjc9Lb_g" {
		t.Errorf("FenceStorageKey(hashed base) = %q, %v", got, err)
	}
	// A base that just fits (974 bytes) overflows once "fence:" is added:
	// the fence key is hashed, and differs from the lock key.
	fitKey := strings.Repeat("k", 964)
	fb, _ := MakeStorageKey(sg, fitKey, RedisKeyLimit, RedisKeyReserve)
	got, err = FenceStorageKey(sg, fb, RedisKeyLimit, RedisKeyReserve)
	if err != nil || got != hashed(sg, "fence:"+fb) || got == fb {
		t.Errorf("FenceStorageKey(974-byte base) = %q, %v", trunc(got), err)
	}
	// The fence key of one user key never equals the lock key of another
	// that spells the same bytes: "fence:"+base includes the prefix.
	other, _ := MakeStorageKey(sg, "fence:resource:123", RedisKeyLimit, RedisKeyReserve)
	fk, _ := FenceStorageKey(sg, base, RedisKeyLimit, RedisKeyReserve)
	if other == fk {
		t.Errorf("lock key of %q collides with fence key of %q", "fence:resource:123", "resource:123")
	}
}

// hashed is the algorithm's hashed form, computed independently.
func hashed(prefix, key string) string {
	prefixed := key
	if prefix != "" {
		prefixed = prefix + ":" + key
	}
	sum := sha256.Sum256([]byte(prefixed))
	h := base64.RawURLEncoding.EncodeToString(sum[:16])
	if prefix == "" {
		return h
	}
	return prefix + ":" + h
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:30] + "…" + s[len(s)-30:]
	}
	return s
}

// TestStorageKeyErrorNeverPrintsKey: a key the backend cannot store is
// refused without the key in the error's text.
func TestStorageKeyErrorNeverPrintsKey(t *testing.T) {
	const key = "orders/secret-customer-42"
	_, err := MakeStorageKey(strings.Repeat("p", 2000), key, RedisKeyLimit, RedisKeyReserve)
	if err == nil || strings.Contains(err.Error(), key) {
		t.Fatalf("MakeStorageKey(too long) = %v; want an error without the key", err)
	}
}

// FuzzNormalizeKey checks NormalizeKey's and MakeStorageKey's invariants
// on arbitrary input.
func FuzzNormalizeKey(f *testing.F) {
	for _, s := range []string{"resource:123", "", "\xff", "cafe\u0301", "\u0958", strings.Repeat("a", 1000),
		strings.Repeat("é", 300), "\U0001F600", "fence:x", ":"} {
		f.Add(s)
	}
	type backend struct{ limit, reserve int }
	backends := []backend{{RedisKeyLimit, RedisKeyReserve}, {PostgresKeyLimit, 0}, {FirestoreKeyLimit, 0}}
	f.Fuzz(func(t *testing.T, key string) {
		n, err := lockstore.NormalizeKey(key)
		if err != nil {
			if lockstore.CodeOf(err) != lockstore.InvalidArgument {
				t.Fatalf("error code %s, want InvalidArgument", lockstore.CodeOf(err))
			}
			if key != "" && utf8.ValidString(key) && len(norm.NFC.String(key)) <= lockstore.MaxKeyLengthBytes {
				t.Fatalf("rejected a valid key: %v", err)
			}
			return
		}
		if !utf8.ValidString(n) || !norm.NFC.IsNormalString(n) || len(n) > lockstore.MaxKeyLengthBytes || n == "" {
			t.Fatalf("NormalizeKey(%q) = %q breaks an invariant", key, n)
		}
		if n2, err := lockstore.NormalizeKey(n); err != nil || n2 != n {
			t.Fatalf("not idempotent: %q -> %q (%v)", n, n2, err)
		}
		if lockstore.HashKey(key) != lockstore.HashKey(n) {
			t.Fatalf("HashKey differs between a key and its NFC form")
		}
		for _, b := range backends {
			for _, prefix := range []string{"syncguard", "", "app:"} {
				s1, err := MakeStorageKey(prefix, n, b.limit, b.reserve)
				if err != nil {
					t.Fatalf("MakeStorageKey(%q, %d): %v", prefix, b.limit, err)
				}
				if len(s1) > b.limit-b.reserve {
					t.Fatalf("storage key of %d bytes over %d-%d", len(s1), b.limit, b.reserve)
				}
				if s2, _ := MakeStorageKey(prefix, n, b.limit, b.reserve); s2 != s1 {
					t.Fatal("MakeStorageKey not deterministic")
				}
				if s3, _ := MakeStorageKey(prefix, key, b.limit, b.reserve); s3 != s1 {
					t.Fatal("MakeStorageKey differs between a key and its NFC form")
				}
				if fk, err := FenceStorageKey(prefix, s1, b.limit, b.reserve); err != nil || len(fk) > b.limit-b.reserve {
					t.Fatalf("FenceStorageKey: %q, %v", trunc(fk), err)
				}
			}
		}
	})
}
