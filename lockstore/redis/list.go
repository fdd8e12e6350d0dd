package redis

import (
	"context"
	"errors"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

var _ lockstore.LockLister = (*Store)(nil)

// Listing bounds. A listing walks the keyspace with SCAN, which costs in
// proportion to the keys it examines, not to the locks it finds: at most
// listScanPages pages of listScanCount slots are examined, whatever the
// size of the database, and the answer says Partial when the walk stopped
// before the cursor came back to 0.
//
// Why not an index kept by the scripts: fencegate shares the key space
// with SyncGuard clients, which take locks with SyncGuard's own scripts; an
// index only fencegate's scripts maintain would miss their locks and show
// an empty console beside a busy store. SCAN sees every lock.
const (
	listScanCount = 1000
	listScanPages = 50
)

// ListHeld lists live locks by scanning the lockId index keys
// (<prefix>:id:*, one per live lock, expiring with it), then reading the
// locks they point at with MGET, re-checking each against its index entry
// and Redis's clock. When the prefix is long enough that index keys are
// hashed, it scans <prefix>:* and keeps the values that are locks.
func (s *Store) ListHeld(ctx context.Context, limit int) (lockstore.LockList, error) {
	const op = "list"
	limit = backend.ListLimit(limit)
	var out lockstore.LockList
	if err := lockstore.ContextError(ctx, op); err != nil {
		return out, err
	}
	t, err := s.client.Time(ctx).Result()
	if err != nil {
		return out, classify(ctx, op, err)
	}
	out.NowMs = t.UnixMilli()

	byIndex := s.idPrefix != ""
	pattern := globEscape(s.prefix) + ":*"
	switch {
	case s.layout == LayoutCluster:
		// Index keys are <prefix>:{TAG}:id:<lockId> (the layout refuses a
		// prefix that would hash them).
		byIndex, pattern = true, globEscape(s.prefix)+":{???}:id:*"
	case byIndex:
		pattern = globEscape(s.idPrefix) + "*"
	}
	// One server, or every master of a cluster in turn: the page budget
	// is the listing's, not each master's.
	nodes := []*goredis.Client{s.single}
	if s.cluster != nil {
		if nodes, err = s.masters(ctx); err != nil {
			return out, classify(ctx, op, err)
		}
	}
	seen := map[string]bool{}
	page := 0
	for _, node := range nodes {
		var cursor uint64
		for ; ; page++ {
			if page == listScanPages {
				out.Partial = true
				return out, nil
			}
			keys, next, err := node.Scan(ctx, cursor, pattern, listScanCount).Result()
			if err != nil {
				return out, classify(ctx, op, err)
			}
			found, err := s.readListed(ctx, node, keys, byIndex, out.NowMs)
			if err != nil {
				return out, classify(ctx, op, err)
			}
			for _, l := range found {
				if seen[l.LockIDHash] {
					continue // SCAN may return a key twice
				}
				if len(out.Locks) == limit {
					out.Partial = true
					return out, nil
				}
				seen[l.LockIDHash] = true
				out.Locks = append(out.Locks, l)
			}
			cursor = next
			if cursor == 0 {
				page++
				break
			}
		}
	}
	return out, nil
}

// readListed turns one SCAN page into live locks: index keys are resolved
// to their lock keys first (byIndex), other keys are read as locks and
// whatever does not decode as one (fence counters, index entries) skipped.
func (s *Store) readListed(ctx context.Context, node *goredis.Client, keys []string, byIndex bool, nowMs int64) ([]lockstore.ListedLock, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	lockKeys := keys
	var wantIDs []string // the lockId each lock key's index entry names
	if byIndex {
		vals, err := s.getAll(ctx, node, keys)
		if err != nil {
			return nil, err
		}
		lockKeys = lockKeys[:0:0]
		for i, v := range vals {
			if str, ok := v.(string); ok && len(keys[i]) >= lockstore.LockIDLength {
				lockKeys = append(lockKeys, str)
				wantIDs = append(wantIDs, keys[i][len(keys[i])-lockstore.LockIDLength:])
			}
		}
		if len(lockKeys) == 0 {
			return nil, nil
		}
	}
	vals, err := s.getAll(ctx, node, lockKeys)
	if err != nil {
		return nil, err
	}
	var out []lockstore.ListedLock
	for i, v := range vals {
		str, ok := v.(string)
		if !ok || !strings.HasPrefix(str, "{") {
			continue
		}
		l, err := decodeLock(str)
		if err != nil || l.LockID == "" || !backend.IsLive(l.ExpiresAtMs, nowMs) {
			continue
		}
		if byIndex && l.LockID != wantIDs[i] {
			continue // a stale index entry: the lock is someone else's now
		}
		out = append(out, lockstore.Lock{Key: l.Key, LockID: l.LockID, Fence: l.Fence, ExpiresAtMs: l.ExpiresAtMs, AcquiredAtMs: l.AcquiredAtMs}.Listed())
	}
	return out, nil
}

// getAll reads keys from node: one MGET on one server; on a cluster
// master, whose keys lie in many slots (MGET would be CROSSSLOT), one
// pipeline of GETs. A missing key is nil.
func (s *Store) getAll(ctx context.Context, node *goredis.Client, keys []string) ([]any, error) {
	if s.cluster == nil {
		return node.MGet(ctx, keys...).Result()
	}
	pipe := node.Pipeline()
	cmds := make([]*goredis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		// A key moved away mid-listing answers MOVED: skip it, the
		// listing is a snapshot and says Partial only for its bounds.
		if !notExecuted(err) {
			return nil, err
		}
	}
	out := make([]any, len(keys))
	for i, c := range cmds {
		if v, err := c.Result(); err == nil {
			out[i] = v
		}
	}
	return out, nil
}

// globEscape quotes the characters SCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
