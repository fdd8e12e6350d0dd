package lockstore

import (
	"crypto/rand"
	"encoding/base64"
)

// LockIDLength is the length of a lockId: 16 random bytes in base64url
// without padding.
const LockIDLength = 22

// NewLockID returns a fresh lockId: 16 bytes from crypto/rand, base64url
// without padding. A lockId is the holder's secret handle; never log it.
func NewLockID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", &Error{Code: Internal, Op: "lockid", Msg: "crypto/rand failed", Err: err}
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// ValidateLockID checks ^[A-Za-z0-9_-]{22}$ and returns an InvalidArgument
// error otherwise. Every operation that takes a lockId calls it before I/O.
// The error never echoes the input (it may be a real lockId with a typo).
func ValidateLockID(id string) error {
	if len(id) != LockIDLength {
		return BadInputf("lockId must be %d base64url characters, got %d bytes", LockIDLength, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return BadInputf("lockId must be base64url ([A-Za-z0-9_-]); byte %d is not", i)
		}
	}
	return nil
}
