package redis

import (
	"context"
)

// ownKeyInfix separates fencegate's own keys from SyncGuard's. Every
// SyncGuard key of this store starts "<prefix>:", and the prefix is never
// empty, so "<prefix>.fencegate:…" cannot be a lock, index or fence counter
// of any user key.
const ownKeyInfix = ".fencegate:"

// ownKey names one of fencegate's own keys (audit streams, write-barrier
// entries): "<prefix>.fencegate:<name>". Every key fencegate keeps beside
// SyncGuard's layout is named here, so none can land on a user key's lock.
func (s *Store) ownKey(name string) string { return s.prefix + ownKeyInfix + name }

// Audit stream names (under ownKey).
const (
	auditStreamName      = "audit"
	auditInputStreamName = "audit:input"
)

// legacyAuditKey is where earlier fencegate versions kept the audit stream:
// on the lock key of user key "audit", which is why that key was reserved.
func (s *Store) legacyAuditKey() string { return s.prefix + ":audit" }

// moveLegacyAudit renames the audit stream from its old place to its new
// one, once: only if the old key holds a stream (a SyncGuard lock on user
// key "audit" is a string and stays) and the new one does not exist yet
// (never merging, never overwriting). It reports whether it moved.
func (s *Store) moveLegacyAudit(ctx context.Context) (bool, error) {
	n, err := moveAuditScript.Run(ctx, s.client, []string{s.legacyAuditKey(), s.audit[0][0]}).Int()
	if err != nil {
		return false, classify(ctx, "open", err)
	}
	return n == 1, nil
}
