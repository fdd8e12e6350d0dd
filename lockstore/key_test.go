package lockstore

import (
	"strings"
	"testing"
)

func TestHashKeyVectors(t *testing.T) {
	tests := []struct{ in, want string }{
		// The pinned SyncGuard vector (docs/design.md, "Hashes, lockIds and errors").
		{"resource:123", "e90a28c676a29a3291e2874a"},
		// Empty input: all three accumulators stay 0.
		{"", "000000000000000000000000"},
		// One code unit c: h1 = c, h2 = 3c, h3 = 7c ('a' = 0x61).
		{"a", "00000061" + "00000123" + "000002a7"},
	}
	for _, tt := range tests {
		if got := HashKey(tt.in); got != tt.want {
			t.Errorf("HashKey(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestHashKeyNFCAndUTF16(t *testing.T) {
	// NFC-equivalent spellings hash alike.
	if a, b := HashKey("caf\u00e9"), HashKey("cafe\u0301"); a != b {
		t.Errorf("composed %s != decomposed %s", a, b)
	}
	// A supplementary-plane rune hashes as its two UTF-16 surrogates
	// (SyncGuard iterates JavaScript code units): U+1F600 = D83D DE00.
	var h1, h2, h3 int32
	for _, c := range []int32{0xD83D, 0xDE00} {
		h1 = h1*31 + c
		h2 = h2*127 + 3*c
		h3 = h3*2047 + 7*c
	}
	want := hex8(uint32(h1)) + hex8(uint32(h2)) + hex8(uint32(h3))
	if got := HashKey("\U0001F600"); got != want {
		t.Errorf("HashKey(U+1F600) = %s, want %s", got, want)
	}
	if len(HashKey(strings.Repeat("z", 10000))) != 24 {
		t.Error("hash of a long input is not 24 hex digits")
	}
}

func hex8(v uint32) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b)
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:30] + "…" + s[len(s)-30:]
	}
	return s
}

func TestNormalizeKey(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{"empty", "", "", true},
		{"invalid UTF-8", "ab\xffcd", "", true},
		{"lone surrogate encoding", "\xed\xa0\x80", "", true},
		{"ascii", "resource:123", "resource:123", false},
		{"composes", "cafe\u0301", "caf\u00e9", false},
		{"512 bytes", strings.Repeat("k", 512), strings.Repeat("k", 512), false},
		{"513 bytes", strings.Repeat("k", 513), "", true},
		{"513 raw, 512 after NFC", strings.Repeat("k", 510) + "e\u0301", strings.Repeat("k", 510) + "\u00e9", false},
		{"512 raw, 515 after NFC", strings.Repeat("k", 509) + "\u0958", "", true},
		{"multi-byte at 512", strings.Repeat("k", 510) + "\u00e9", strings.Repeat("k", 510) + "\u00e9", false},
		{"multi-byte past 512", strings.Repeat("k", 511) + "\u00e9", "", true},
		{"whitespace is a key", " ", " ", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeKey(tt.in)
			if tt.wantErr {
				if CodeOf(err) != InvalidArgument {
					t.Fatalf("got (%q, %v), want InvalidArgument", trunc(got), err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got (%q, %v), want %q", trunc(got), err, trunc(tt.want))
			}
		})
	}
}
