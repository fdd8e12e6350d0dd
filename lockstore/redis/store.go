package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lockstore"
)

// Store is a lockstore.Store and lockstore.AuditLog over one Redis database
// (a single server, or a master found through Sentinel). It is safe for
// concurrent use.
type Store struct {
	client    *goredis.Client
	prefix    string
	idPrefix  string // prefix of lockId index keys when they are not hashed, else ""
	auditKey  string // decision-class audit stream, ownKey(auditStreamName)
	inputKey  string // input-class audit stream, ownKey(auditInputStreamName)
	cleanup   bool
	retention lockstore.AuditRetention
	log       *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

var (
	_ lockstore.Store    = (*Store)(nil)
	_ lockstore.AuditLog = (*Store)(nil)
)

// Open validates cfg, connects, pings the server and loads the scripts into
// its script cache. The returned store owns the connection pool; Close it.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	const op = "open"
	prefix, err := normalizePrefix(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	s := &Store{
		prefix:    prefix,
		cleanup:   cfg.CleanupInIsLocked,
		retention: cfg.AuditRetention.WithDefaults(),
		log:       logger.With("store", "redis"),
	}
	s.auditKey, s.inputKey = s.ownKey(auditStreamName), s.ownKey(auditInputStreamName)
	// The IsLocked cleanup derives index keys inside the script, which only
	// works while they are plain prefix:id:<lockId>; a prefix long enough to
	// hash them leaves their removal to their own TTL.
	probe := strings.Repeat("A", lockstore.LockIDLength)
	if k, err := lockstore.MakeStorageKey(prefix, "id:"+probe, lockstore.RedisKeyLimit, lockstore.RedisKeyReserve); err == nil && k == prefix+":id:"+probe {
		s.idPrefix = prefix + ":id:"
	}

	opts, fo := cfg.clientOptions()
	if fo != nil {
		s.client = goredis.NewFailoverClient(fo)
	} else {
		s.client = goredis.NewClient(opts)
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		_ = s.client.Close()
		return nil, classify(ctx, op, fmt.Errorf("ping: %w", err))
	}
	if err := s.checkEviction(ctx); err != nil {
		_ = s.client.Close()
		return nil, err
	}
	// Loading up front makes the first EVALSHA of each script hit; Run still
	// falls back to EVAL if the cache is flushed later.
	pipe := s.client.Pipeline()
	loads := make([]*goredis.StringCmd, len(allScripts))
	for i, sc := range allScripts {
		loads[i] = pipe.ScriptLoad(ctx, sc.src)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		_ = s.client.Close()
		return nil, classify(ctx, op, fmt.Errorf("script load: %w", err))
	}
	for i, sc := range allScripts {
		if got := loads[i].Val(); got != sc.Hash() {
			_ = s.client.Close()
			return nil, lockstore.Errorf(lockstore.Internal, op, "server digest %q of a script differs from ours %q", got, sc.Hash())
		}
	}
	if moved, err := s.moveLegacyAudit(ctx); err != nil {
		_ = s.client.Close()
		return nil, err
	} else if moved {
		s.log.Info("redis audit stream moved to its own key", "from", s.legacyAuditKey(), "to", s.auditKey)
	}
	s.log.Info("redis lock store opened", "config", cfg.String())
	return s, nil
}

// Client returns the underlying go-redis client (for tests and tooling).
func (s *Store) Client() *goredis.Client { return s.client }

// Prefix returns the key prefix in use.
func (s *Store) Prefix() string { return s.prefix }

// Capabilities reports server time (Redis TIME) and fencing.
func (s *Store) Capabilities() lockstore.Capabilities {
	return lockstore.Capabilities{Backend: "redis", SupportsFencing: true, TimeAuthority: lockstore.ServerTime}
}

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return classify(ctx, "ping", err)
	}
	return nil
}

// Close closes the connection pool. Locks stay in Redis until they expire.
// It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if err := s.client.Close(); err != nil {
			s.closeErr = classify(context.Background(), "close", err)
		}
	})
	return s.closeErr
}

// LockKey returns the storage key of user key's lock.
func (s *Store) LockKey(key string) (string, error) {
	k, err := s.normalize(key)
	if err != nil {
		return "", err
	}
	return lockstore.MakeStorageKey(s.prefix, k, lockstore.RedisKeyLimit, lockstore.RedisKeyReserve)
}

// FenceKey returns the storage key of user key's fence counter.
func (s *Store) FenceKey(key string) (string, error) {
	lk, err := s.LockKey(key)
	if err != nil {
		return "", err
	}
	return lockstore.FenceStorageKey(s.prefix, lk, lockstore.RedisKeyLimit, lockstore.RedisKeyReserve)
}

// IndexKey returns the storage key of lockID's reverse index.
func (s *Store) IndexKey(lockID string) (string, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return "", err
	}
	return lockstore.MakeStorageKey(s.prefix, "id:"+lockID, lockstore.RedisKeyLimit, lockstore.RedisKeyReserve)
}

// Reserved user keys. The layout is SyncGuard's, where a user key "id:X"
// lands on lockId X's index key and "fence:<lockKey>" on another key's fence
// counter (for every prefix, empty or not). Such keys could overwrite a
// counter or steal an index, so this backend refuses them as input
// (InvalidArgument). fencegate's own keys live under ownKey, outside this
// space, so no other key is reserved.
var reservedKeyPrefixes = []string{"id:", "fence:"}

// normalize is lockstore.NormalizeKey plus the reserved-key check.
func (s *Store) normalize(key string) (string, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return "", err
	}
	for _, p := range reservedKeyPrefixes {
		if strings.HasPrefix(k, p) {
			return "", lockstore.Errorf(lockstore.InvalidArgument, "validate",
				"keys starting %q are reserved by the Redis key layout", p)
		}
	}
	return k, nil
}

// keys validates a user key and derives its lock and fence storage keys.
func (s *Store) keys(key string) (norm, lockKey, fenceKey string, err error) {
	norm, err = s.normalize(key)
	if err != nil {
		return "", "", "", err
	}
	lockKey, err = lockstore.MakeStorageKey(s.prefix, norm, lockstore.RedisKeyLimit, lockstore.RedisKeyReserve)
	if err != nil {
		return "", "", "", err
	}
	fenceKey, err = lockstore.FenceStorageKey(s.prefix, lockKey, lockstore.RedisKeyLimit, lockstore.RedisKeyReserve)
	if err != nil {
		return "", "", "", err
	}
	return norm, lockKey, fenceKey, nil
}

// Acquire takes the lock on key for ttl, in one script: read the lock, read
// the counter and refuse past FenceMax, INCR, write lock and index.
func (s *Store) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	const op = "acquire"
	ttlMs, err := lockstore.ValidateTTL(ttl)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	norm, lockKey, fenceKey, err := s.keys(key)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	if e := lockstore.ContextError(ctx, op); e != nil {
		return lockstore.AcquireResult{}, e
	}
	lockID, err := lockstore.NewLockID()
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	idKey, err := s.IndexKey(lockID)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	reply, err := acquireScript.Run(ctx, s.client, []string{lockKey, idKey, fenceKey},
		lockID, ttlMs, norm, lockstore.FenceMax).Slice()
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithContext(classify(ctx, op, err), key, "")
	}
	status, err := replyInt(reply, 0)
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithContext(badReply(op, err), key, "")
	}
	switch status {
	case acquireOK:
	case acquireLocked:
		return lockstore.AcquireResult{Reason: lockstore.ReasonLocked}, nil
	case acquireOverflow:
		s.log.Error("fence counter exhausted; rotate the key namespace", "keyHash", lockstore.HashKey(norm), "max", lockstore.FenceMax)
		return lockstore.AcquireResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, Key: key,
			Msg: fmt.Sprintf("fence counter would pass %d; nothing was written", lockstore.FenceMax)}
	case acquireCorrupt:
		return lockstore.AcquireResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, Key: key,
			Msg: "the lock key holds a value that is not a lock; refusing to overwrite it"}
	case acquireBadFence:
		return lockstore.AcquireResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, Key: key,
			Msg: "the fence counter holds a value that is not a non-negative integer"}
	default:
		return lockstore.AcquireResult{}, lockstore.WithContext(badReply(op, fmt.Errorf("status %d", status)), key, "")
	}
	n, err1 := replyInt(reply, 1)
	exp, err2 := replyInt(reply, 2)
	if err1 != nil || err2 != nil {
		return lockstore.AcquireResult{}, lockstore.WithContext(badReply(op, fmt.Errorf("fields: %v %v", err1, err2)), key, "")
	}
	fence, err := lockstore.FormatFence(n)
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithContext(badReply(op, err), key, "")
	}
	if lockstore.FenceNeedsWarning(n) {
		s.log.Warn("fence counter past the warning level; plan a key-namespace rotation",
			"keyHash", lockstore.HashKey(norm), "fence", n, "warn", lockstore.FenceWarn, "max", lockstore.FenceMax)
	}
	return lockstore.AcquireResult{OK: true, LockID: lockID, Fence: fence, ExpiresAtMs: exp}, nil
}

// Release drops the lock lockID holds if it is still live. It is safe to
// call without owning the lock: anything else is OK=false.
func (s *Store) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	const op = "release"
	idKey, err := s.IndexKey(lockID)
	if err != nil {
		return lockstore.ReleaseResult{}, err
	}
	if e := lockstore.ContextError(ctx, op); e != nil {
		return lockstore.ReleaseResult{}, e
	}
	status, err := releaseScript.Run(ctx, s.client, []string{idKey}, lockID).Int64()
	if err != nil {
		return lockstore.ReleaseResult{}, lockstore.WithContext(classify(ctx, op, err), "", lockID)
	}
	switch status {
	case mutateOK:
		return lockstore.ReleaseResult{OK: true}, nil
	case mutateExpired:
		return lockstore.ReleaseResult{Detail: lockstore.DetailExpired}, nil
	case mutateNotFound:
		return lockstore.ReleaseResult{Detail: lockstore.DetailNotFound}, nil
	}
	return lockstore.ReleaseResult{}, lockstore.WithContext(badReply(op, fmt.Errorf("status %d", status)), "", lockID)
}

// Extend sets the live lock's expiry to now+ttl by the server clock and
// returns it. It never revives an expired lock.
func (s *Store) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	const op = "extend"
	ttlMs, err := lockstore.ValidateTTL(ttl)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	idKey, err := s.IndexKey(lockID)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	if e := lockstore.ContextError(ctx, op); e != nil {
		return lockstore.ExtendResult{}, e
	}
	reply, err := extendScript.Run(ctx, s.client, []string{idKey}, lockID, ttlMs).Slice()
	if err != nil {
		return lockstore.ExtendResult{}, lockstore.WithContext(classify(ctx, op, err), "", lockID)
	}
	status, err := replyInt(reply, 0)
	if err != nil {
		return lockstore.ExtendResult{}, lockstore.WithContext(badReply(op, err), "", lockID)
	}
	switch status {
	case mutateOK:
		exp, err := replyInt(reply, 1)
		if err != nil {
			return lockstore.ExtendResult{}, lockstore.WithContext(badReply(op, err), "", lockID)
		}
		return lockstore.ExtendResult{OK: true, ExpiresAtMs: exp}, nil
	case mutateExpired:
		return lockstore.ExtendResult{Detail: lockstore.DetailExpired}, nil
	case mutateNotFound:
		return lockstore.ExtendResult{Detail: lockstore.DetailNotFound}, nil
	}
	return lockstore.ExtendResult{}, lockstore.WithContext(badReply(op, fmt.Errorf("status %d", status)), "", lockID)
}

// IsLocked reports whether key has a live lock. It is read-only unless
// Config.CleanupInIsLocked is set.
func (s *Store) IsLocked(ctx context.Context, key string) (bool, error) {
	held, _, err := s.readKey(ctx, "isLocked", key, s.cleanup)
	return held != nil, err
}

// LookupKey returns the sanitised live lock on key, or nil.
func (s *Store) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	held, norm, err := s.readKey(ctx, "lookup", key, false)
	if err != nil || held == nil {
		return nil, err
	}
	return info(norm, held), nil
}

// readKey runs readKeyScript and returns the live lock, or nil.
func (s *Store) readKey(ctx context.Context, op, key string, cleanup bool) (*storedLock, string, error) {
	norm, lockKey, _, err := s.keys(key)
	if err != nil {
		return nil, "", err
	}
	if e := lockstore.ContextError(ctx, op); e != nil {
		return nil, "", e
	}
	flag := "0"
	if cleanup {
		flag = "1"
	}
	reply, err := readKeyScript.Run(ctx, s.client, []string{lockKey}, flag, s.idPrefix).Slice()
	if err != nil {
		return nil, "", lockstore.WithContext(classify(ctx, op, err), key, "")
	}
	held, _, err := liveLock(reply, 0, 1)
	if err != nil {
		return nil, "", lockstore.WithContext(badReply(op, err), key, "")
	}
	return held, norm, nil
}

// LookupLockID returns the sanitised live lock lockID holds, or nil. The
// index and the lock are read in one script.
func (s *Store) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	const op = "lookup"
	idKey, err := s.IndexKey(lockID)
	if err != nil {
		return nil, err
	}
	if e := lockstore.ContextError(ctx, op); e != nil {
		return nil, e
	}
	reply, err := readLockIDScript.Run(ctx, s.client, []string{idKey}, lockID).Slice()
	if err != nil {
		return nil, lockstore.WithContext(classify(ctx, op, err), "", lockID)
	}
	held, _, err := liveLock(reply, 0, 1)
	if err != nil {
		return nil, lockstore.WithContext(badReply(op, err), "", lockID)
	}
	// ADR-003, again on this side of the wire.
	if held == nil || held.LockID != lockID {
		return nil, nil
	}
	return info(held.Key, held), nil
}

// Inspect reads the live lock on key and the latest fence issued for it in
// one script, at one server instant.
func (s *Store) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	const op = "inspect"
	_, lockKey, fenceKey, err := s.keys(key)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	if e := lockstore.ContextError(ctx, op); e != nil {
		return lockstore.KeyState{}, e
	}
	reply, err := inspectScript.Run(ctx, s.client, []string{lockKey, fenceKey}).Slice()
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithContext(classify(ctx, op, err), key, "")
	}
	held, now, err := liveLock(reply, 0, 2)
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithContext(badReply(op, err), key, "")
	}
	ks := lockstore.KeyState{NowMs: now}
	if c, ok := reply[1].(string); ok {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			return lockstore.KeyState{}, lockstore.WithContext(badReply(op, fmt.Errorf("fence counter is not an integer")), key, "")
		}
		if n > 0 {
			if ks.LatestFence, err = lockstore.FormatFence(n); err != nil {
				return lockstore.KeyState{}, lockstore.WithContext(badReply(op, err), key, "")
			}
		}
	}
	if held != nil {
		ks.Live = &lockstore.HeldLock{LockID: held.LockID, Fence: held.Fence,
			ExpiresAtMs: held.ExpiresAtMs, AcquiredAtMs: held.AcquiredAtMs}
		// A live lock's fence came from this counter; if the counter reads
		// lower (it was reset by hand), report the lock's.
		if lockstore.ValidFence(held.Fence) && ks.LatestFence < held.Fence {
			ks.LatestFence = held.Fence
		}
	}
	return ks, nil
}

// storedLock is SyncGuard's lock value.
type storedLock struct {
	LockID       string `json:"lockId"`
	ExpiresAtMs  int64  `json:"-"`
	AcquiredAtMs int64  `json:"-"`
	Key          string `json:"key"`
	Fence        string `json:"fence"`
}

// decodeLock parses a lock value. Times are decoded as JSON numbers so a
// value another writer stored as 1.7e12 still parses.
func decodeLock(raw string) (*storedLock, error) {
	var v struct {
		storedLock
		ExpiresAtMs  json.Number `json:"expiresAtMs"`
		AcquiredAtMs json.Number `json:"acquiredAtMs"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return nil, fmt.Errorf("lock value is not JSON: %w", err)
	}
	exp, err := jsonInt(v.ExpiresAtMs)
	if err != nil {
		return nil, fmt.Errorf("lock value expiresAtMs: %w", err)
	}
	acq, _ := jsonInt(v.AcquiredAtMs) // informational only
	l := v.storedLock
	l.ExpiresAtMs, l.AcquiredAtMs = exp, acq
	return &l, nil
}

func jsonInt(n json.Number) (int64, error) {
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("not an integer: %q", string(n))
	}
	return int64(f), nil
}

// liveLock reads the reply's lock value at index vi and the server clock at
// index ni, and returns the lock if the liveness predicate holds.
func liveLock(reply []any, vi, ni int) (*storedLock, int64, error) {
	now, err := replyInt(reply, ni)
	if err != nil {
		return nil, 0, err
	}
	raw, ok := reply[vi].(string)
	if !ok {
		return nil, now, nil
	}
	l, err := decodeLock(raw)
	if err != nil {
		return nil, now, err
	}
	if !lockstore.IsLive(l.ExpiresAtMs, now) {
		return nil, now, nil
	}
	return l, now, nil
}

func info(key string, l *storedLock) *lockstore.LockInfo {
	return &lockstore.LockInfo{
		KeyHash:      lockstore.HashKey(key),
		LockIDHash:   lockstore.HashKey(l.LockID),
		Fence:        l.Fence,
		ExpiresAtMs:  l.ExpiresAtMs,
		AcquiredAtMs: l.AcquiredAtMs,
	}
}

// replyInt returns reply[i] as an integer.
func replyInt(reply []any, i int) (int64, error) {
	if i >= len(reply) {
		return 0, fmt.Errorf("reply has %d fields, want more than %d", len(reply), i)
	}
	n, ok := reply[i].(int64)
	if !ok {
		return 0, fmt.Errorf("reply field %d is %T, want an integer", i, reply[i])
	}
	return n, nil
}

func badReply(op string, err error) *lockstore.Error {
	return &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "unexpected script reply", Err: err}
}

// checkEviction refuses a Redis that may evict keys without a TTL: fence
// counters have none, and an evicted counter starts again at 1, so fences
// would repeat. volatile-* policies evict only keys with a TTL (locks, which
// expire early then; the fences still protect), so they get a warning. A
// Redis that denies CONFIG (managed services often do) is logged and
// trusted: its operator must keep maxmemory-policy at noeviction.
func (s *Store) checkEviction(ctx context.Context) error {
	const op = "open"
	res, err := s.client.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		if ctx.Err() != nil {
			return classify(ctx, op, err)
		}
		s.log.Warn("could not read maxmemory-policy; fence counters are only safe with noeviction", "err", err)
		return nil
	}
	switch policy := res["maxmemory-policy"]; {
	case policy == "" || policy == "noeviction":
		return nil
	case strings.HasPrefix(policy, "allkeys-"):
		return lockstore.Errorf(lockstore.InvalidArgument, op,
			"redis maxmemory-policy is %s: it may evict fence counters and fences would repeat; set it to noeviction", policy)
	default:
		s.log.Warn("redis maxmemory-policy evicts keys with a TTL: locks may vanish early under memory pressure (fences still protect writes); noeviction is recommended", "policy", policy)
		return nil
	}
}
