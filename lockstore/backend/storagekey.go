package backend

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"

	"github.com/fencegate/fencegate/lockstore"
	"golang.org/x/text/unicode/norm"
)

// Storage-key limits per backend, in UTF-8 bytes, and the bytes each backend
// reserves for suffixes it adds itself (docs/design.md, "Storage keys").
const (
	RedisKeyLimit     = 1000
	RedisKeyReserve   = 26
	PostgresKeyLimit  = 1700
	FirestoreKeyLimit = 1500
)

// hashedKeyLen is the length of the base64url form of a 16-byte digest.
const hashedKeyLen = 22

// MakeStorageKey derives the backend storage key for a user key, the same
// way on every backend so one user key maps to one lock and one fence
// counter everywhere:
//
//   - the key is NFC-normalised, trailing ':' are stripped from prefix;
//   - prefix+":"+key (or key alone with an empty prefix) is used when it fits
//     in limit-reserve bytes;
//   - otherwise prefix+":"+base64url(sha256(prefixed)[:16]) (22 characters).
//
// It fails with InvalidArgument when even the hashed form cannot fit.
func MakeStorageKey(prefix, key string, limit, reserve int) (string, error) {
	key = norm.NFC.String(key)
	prefix = strings.TrimRight(prefix, ":")
	sep := 0
	if prefix != "" {
		sep = 1
	}
	if len(prefix)+sep+reserve > limit {
		return "", lockstore.Errorf(lockstore.InvalidArgument, "storage-key",
			"prefix of %d bytes leaves no room under the backend limit of %d bytes", len(prefix), limit)
	}
	prefixed := key
	if prefix != "" {
		prefixed = prefix + ":" + key
	}
	if len(prefixed)+reserve <= limit {
		return prefixed, nil
	}
	sum := sha256.Sum256([]byte(prefixed))
	hashed := base64.RawURLEncoding.EncodeToString(sum[:16])
	if prefix == "" {
		if hashedKeyLen+reserve > limit {
			return "", lockstore.Errorf(lockstore.InvalidArgument, "storage-key", "backend limit %d too small for a hashed key", limit)
		}
		return hashed, nil
	}
	if len(prefix)+1+hashedKeyLen+reserve > limit {
		return "", lockstore.Errorf(lockstore.InvalidArgument, "storage-key",
			"prefix of %d bytes is too long for the backend limit of %d bytes even after hashing", len(prefix), limit)
	}
	return prefix + ":" + hashed, nil
}

// FenceStorageKey derives a fence counter's storage key from a lock's
// storage key (the two-step derivation): the counter of lock storage key
// base is makeStorageKey(prefix, "fence:"+base). Counters are never deleted.
func FenceStorageKey(prefix, base string, limit, reserve int) (string, error) {
	return MakeStorageKey(prefix, "fence:"+base, limit, reserve)
}
