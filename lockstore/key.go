package lockstore

import (
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// MaxKeyLengthBytes is the limit on a user key, in UTF-8 bytes after NFC
// normalisation, on every backend (it bounds what a caller can make us store).
const MaxKeyLengthBytes = 512

// NormalizeKey returns key in Unicode NFC, or an InvalidArgument error if the
// key is empty, not valid UTF-8, or longer than MaxKeyLengthBytes once
// normalised. Every operation that takes a key calls it before any I/O, so
// NFC-equivalent keys name one lock.
func NormalizeKey(key string) (string, error) {
	if key == "" {
		return "", BadInputf("key must not be empty")
	}
	if !utf8.ValidString(key) {
		return "", BadInputf("key must be valid UTF-8")
	}
	n := norm.NFC.String(key)
	if len(n) > MaxKeyLengthBytes {
		return "", BadInputf(
			"key is %d bytes after NFC normalisation; the limit is %d", len(n), MaxKeyLengthBytes)
	}
	return n, nil
}
