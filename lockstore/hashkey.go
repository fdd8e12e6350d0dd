package lockstore

import (
	"fmt"
	"unicode/utf16"

	"golang.org/x/text/unicode/norm"
)

// HashKey is the sanitised form of a key or lockId used in lookups,
// telemetry, audit events and logs: three polynomial hashes over the UTF-16
// code units of the NFC form, with int32 wrap-around, as 24 hex digits.
// It is SyncGuard's hash, so both report the same keyHash for one key.
// It identifies, it does not protect: never use it as a secret.
//
//	HashKey("resource:123") == "e90a28c676a29a3291e2874a"
func HashKey(v string) string {
	var h1, h2, h3 int32
	for _, c := range utf16.Encode([]rune(norm.NFC.String(v))) {
		u := int32(c)
		h1 = h1*31 + u
		h2 = h2*127 + 3*u
		h3 = h3*2047 + 7*u
	}
	return fmt.Sprintf("%08x%08x%08x", uint32(h1), uint32(h2), uint32(h3))
}
