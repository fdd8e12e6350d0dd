package firestore

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"

	"github.com/fencegate/fencegate/lockstore/backend"
)

// lockDocID returns the document ID of the lock on the normalised key nk.
//
// It is makeStorageKey("", nk, 1500, 0) — the key itself, since a user key
// (≤ 512 bytes) never reaches Firestore's 1500-byte limit — whenever that is
// a legal document ID, which keeps the layout byte-for-byte SyncGuard's.
//
// Some legal user keys are not legal document IDs: a '/' would make the ID a
// path (the key "a/b" would name a sub-collection), and ".", ".." and
// __.*__ are reserved. The specs do not cover this case (SyncGuard's own
// Firestore backend cannot store such keys at all), so we apply the specs'
// answer for a storage key the backend cannot hold (docs/design.md, "Storage keys"): the hashed
// form makeStorageKey uses for an over-long key, base64url of the first 16
// bytes of SHA-256 of the key, 22 characters. No SyncGuard client can hold a
// lock on such a key, so nothing shared is lost, and the key works the same
// on every fencegate backend.
func lockDocID(nk string) (string, error) {
	id, err := backend.MakeStorageKey("", nk, backend.FirestoreKeyLimit, 0)
	if err != nil {
		return "", err
	}
	if legalDocID(id) {
		return id, nil
	}
	sum := sha256.Sum256([]byte(id))
	return base64.RawURLEncoding.EncodeToString(sum[:16]), nil
}

// fenceDocID returns the counter document ID for a lock document ID, by the
// two-step derivation: makeStorageKey("", "fence:"+lockDocID, 1500, 0).
// The result starts with "fence:" and contains no '/', so it is always a
// legal document ID.
func fenceDocID(lockID string) (string, error) {
	return backend.FenceStorageKey("", lockID, backend.FirestoreKeyLimit, 0)
}

// docIDs returns the lock and counter document IDs of the normalised key nk.
func docIDs(nk string) (lock, fence string, err error) {
	if lock, err = lockDocID(nk); err != nil {
		return "", "", err
	}
	if fence, err = fenceDocID(lock); err != nil {
		return "", "", err
	}
	return lock, fence, nil
}

// legalDocID reports whether id obeys Firestore's document ID rules (UTF-8
// and length are already guaranteed by NormalizeKey and MakeStorageKey).
func legalDocID(id string) bool {
	return id != "" && !strings.Contains(id, "/") && id != "." && id != ".." && !reservedID(id)
}

// reservedID reports whether id has Firestore's reserved form __.*__.
func reservedID(id string) bool {
	return len(id) >= 4 && strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__")
}
