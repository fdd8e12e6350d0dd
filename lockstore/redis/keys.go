package redis

import (
	"strings"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// LockKey returns the storage key of user key's lock.
func (s *Store) LockKey(key string) (string, error) {
	k, err := normalize(key)
	if err != nil {
		return "", err
	}
	lk, _, err := s.keys(k)
	return lk, err
}

// FenceKey returns the storage key of user key's fence counter.
func (s *Store) FenceKey(key string) (string, error) {
	k, err := normalize(key)
	if err != nil {
		return "", err
	}
	_, fk, err := s.keys(k)
	return fk, err
}

// IndexKey returns the storage key of lockID's reverse index.
func (s *Store) IndexKey(lockID string) (string, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return "", err
	}
	return backend.MakeStorageKey(s.keyPrefix(lockID[:tagLen]), "id:"+lockID, backend.RedisKeyLimit, backend.RedisKeyReserve)
}

// keyPrefix is the prefix of the keys of a lock whose hash tag is tag: the
// store's prefix in SyncGuard's layout (which has no tags), the tagged one
// in the cluster layout.
func (s *Store) keyPrefix(tag string) string {
	if s.layout == LayoutCluster {
		return s.taggedPrefix(tag)
	}
	return s.prefix
}

// newLockID is a fresh lockId for a lock on the normalised key: in the
// cluster layout it carries the key's hash tag (cluster.go).
func (s *Store) newLockID(norm string) (string, error) {
	if s.layout == LayoutCluster {
		return newTaggedLockID(keyTag(norm))
	}
	return lockstore.NewLockID()
}

// idPrefixOf is the prefix of the index keys of locks on the normalised key
// (the readKey script's cleanup derives the index key from it), or "".
func (s *Store) idPrefixOf(norm string) string {
	if s.layout == LayoutCluster {
		return s.taggedPrefix(keyTag(norm)) + ":id:"
	}
	return s.idPrefix
}

// Reserved user keys. The layout is SyncGuard's, where a user key "id:X"
// lands on lockId X's index key and "fence:<lockKey>" on another key's fence
// counter (for every prefix, empty or not). Such keys could overwrite a
// counter or steal an index, so this backend refuses them as input
// (InvalidArgument). fencegate's own keys live under ownKey, outside this
// space, so no other key is reserved.
var reservedKeyPrefixes = []string{"id:", "fence:"}

// normalize is lockstore.NormalizeKey plus the reserved-key check.
func normalize(key string) (string, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return "", err
	}
	return k, checkReserved(k)
}

// checkReserved refuses a normalised key that the Redis key layout reserves.
func checkReserved(k string) error {
	for _, p := range reservedKeyPrefixes {
		if strings.HasPrefix(k, p) {
			return lockstore.BadInputf(
				"keys starting %q are reserved by the Redis key layout", p)
		}
	}
	return nil
}

// keys checks a normalised user key (backend.PrecheckKey) against the
// reserved keys and derives its lock and fence storage keys.
func (s *Store) keys(norm string) (lockKey, fenceKey string, err error) {
	if err := checkReserved(norm); err != nil {
		return "", "", err
	}
	p := s.prefix
	if s.layout == LayoutCluster {
		p = s.taggedPrefix(keyTag(norm))
	}
	lockKey, err = backend.MakeStorageKey(p, norm, backend.RedisKeyLimit, backend.RedisKeyReserve)
	if err != nil {
		return "", "", err
	}
	fenceKey, err = backend.FenceStorageKey(p, lockKey, backend.RedisKeyLimit, backend.RedisKeyReserve)
	if err != nil {
		return "", "", err
	}
	return lockKey, fenceKey, nil
}
