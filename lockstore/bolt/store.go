// Package bolt is fencegate's embedded, single-node lock store: one bbolt
// file holds the locks, the lockId index, the fence counters and the audit
// trail, so fences keep growing across restarts with nothing else to run.
//
// Every mutation runs whole inside one bbolt read-write transaction, which
// is the whole atomicity story: bbolt admits one writer at a time and
// commits or rolls back as a unit. Concurrent mutations share a commit
// (group commit) so the fsync is paid once per wave, not once per call. Time is the process's clock (client time authority).
// The file is locked while open; a second process gets a clear error.
//
// The file stays inspectable with the bbolt CLI (bbolt buckets, bbolt keys,
// bbolt get --format hex): the bucket names below say what each holds, and
// record.go documents the lock record byte by byte. A lock costs one
// element in each of locks, lock_ids and fence_counters; bbolt's default
// page fill (50% at a split) is kept on purpose, because a higher fill
// halves the density of pages that random keys are inserted into.
//
// Lock records are written in a binary form that fencegate versions before
// it cannot read: an older binary on a file this version wrote fails
// closed (Internal) on every such key, forever. Rolling back therefore
// takes one step first: open the file once with Config.Records =
// RecordsJSON (store URL bolt:///path.db?records=json), which rewrites
// every binary record as the JSON record older versions wrote, in one
// transaction before serving, and writes only JSON from then on. JSON
// records are read by every version, this one included.
package bolt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Bucket names. Fence counters live apart from locks so that deleting a
// lock can never touch its counter; counters are never deleted.
var (
	bucketLocks  = []byte("locks")          // normalised key → lock record (binary, or JSON from older files: record.go)
	bucketIDs    = []byte("lock_ids")       // lockId → normalised key
	bucketFences = []byte("fence_counters") // normalised key → decimal counter
	bucketAudit  = []byte("audit")          // decision events: timeMs(8, BE) ‖ seq(8, BE) → AuditEvent (JSON)
	bucketInput  = []byte("audit_input")    // input events, keyed as bucketAudit
	bucketMeta   = []byte("meta")           // bookkeeping, e.g. the audit event count
)

// Store is the bbolt-backed lock store. It implements lockstore.Store,
// lockstore.AuditLog and lockstore.HeldCounter and is safe for concurrent
// use.
type Store struct {
	db        *bbolt.DB
	writes    *groupCommit
	path      string
	log       *slog.Logger
	retention lockstore.AuditRetention
	floor     backend.FenceFloor
	// now is the time authority; tests replace it to move time.
	now func() time.Time
	// encode and decode are the lock record codec: encodeRecord, or
	// encodeJSONRecord with records=json, and decodeRecord (both formats);
	// tests replace decode to prove that a broken decoder is caught.
	encode func(*lockRecord) ([]byte, error)
	decode func(k string, v []byte) (*lockRecord, error)

	// sweepMu guards sweepFrom, the key after which the next SweepBarrier
	// continues its scan (nil: from the start).
	sweepMu   sync.Mutex
	sweepFrom []byte

	closeOnce sync.Once
	closeErr  error
}

var (
	_ lockstore.Store       = (*Store)(nil)
	_ lockstore.AuditLog    = (*Store)(nil)
	_ lockstore.HeldCounter = (*Store)(nil)
)

// Open opens (creating if needed) the store file at cfg.Path. If another
// process holds the file, Open fails after cfg.OpenTimeout with an error
// saying so rather than waiting forever. With cfg.Records = RecordsJSON it
// first rewrites every binary lock record as JSON, in the transaction
// that prepares the file, and logs how many.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	return open(ctx, cfg, encodeJSONRecord)
}

// open is Open with the records=json encoder as a parameter, so that
// tests can prove theirs catch a broken one.
func open(ctx context.Context, cfg Config, encodeJSON func(*lockRecord) ([]byte, error)) (*Store, error) {
	if err := lockstore.ContextError(ctx, "open"); err != nil {
		return nil, err
	}
	if cfg.Path == "" {
		return nil, lockstore.Errorf(lockstore.InvalidArgument, "open", "bolt: Config.Path is empty")
	}
	if err := cfg.Records.check(); err != nil {
		return nil, err
	}
	timeout := cfg.OpenTimeout
	if timeout <= 0 {
		timeout = DefaultOpenTimeout
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o700); err != nil {
		return nil, &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: "open",
			Msg: "bolt: create directory for " + cfg.Path, Err: err}
	}
	// bbolt's durability defaults stay: the freelist is written with every
	// commit and file growth is fsynced. With 100,000 held locks the file
	// has a few dozen free pages, so the freelist is one small page per
	// commit; NoFreelistSync would save that write but make every Open
	// walk the whole file to rebuild the freelist.
	db, err := bbolt.Open(cfg.Path, 0o600, &bbolt.Options{Timeout: timeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: "open",
			Msg: fmt.Sprintf("bolt: %s is in use by another fencegate process (pid unknown); "+
				"gave up after %s waiting for its file lock — stop that process or point this one at another file",
				cfg.Path, timeout),
			Err: err}
	}
	if err != nil {
		return nil, &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: "open",
			Msg: "bolt: open " + cfg.Path, Err: err}
	}
	var (
		conv  conversion
		moved int
	)
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, b := range append([][]byte{bucketLocks, bucketIDs, bucketFences, bucketAudit, bucketInput, bucketMeta}, barrierBuckets...) {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		var err error
		if moved, err = migrateWrites(tx); err != nil {
			return fmt.Errorf("move write barrier entries into the index: %w", err)
		}
		if cfg.Records != RecordsJSON {
			return nil
		}
		c, err := convertToJSON(tx, encodeJSON)
		if err != nil {
			return fmt.Errorf("convert lock records to JSON: %w", err)
		}
		conv = c
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, &lockstore.Error{Code: lockstore.Internal, Op: "open", Msg: "bolt: initialise " + cfg.Path, Err: err}
	}
	s := &Store{
		db:        db,
		writes:    &groupCommit{db: db},
		path:      cfg.Path,
		log:       logger.With("store", "bolt"),
		retention: cfg.AuditRetention.WithDefaults(),
		floor:     cfg.FenceFloor,
		now:       time.Now,
		encode:    encodeRecord,
		decode:    decodeRecord,
	}
	if cfg.Records == RecordsJSON {
		s.encode = encodeJSON
		logConversion(ctx, s.log, cfg.Path, conv)
	}
	if moved > 0 {
		s.log.LogAttrs(ctx, slog.LevelInfo, "bolt: moved write barrier entries from the legacy bucket into the index",
			slog.Int("entries", moved))
	}
	return s, nil
}

// Capabilities reports bolt on client (this process's) time.
func (s *Store) Capabilities() lockstore.Capabilities {
	return lockstore.Capabilities{Backend: "bolt", TimeAuthority: lockstore.ClientTime}
}

// Ping checks that the file is open and readable.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.view(ctx, "ping", func(*bbolt.Tx) error { return nil }); err != nil {
		return err
	}
	return nil
}

// Close closes the file and releases its lock. Locks stay in the file and
// are seen again by the next Open. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if err := s.db.Close(); err != nil {
			s.closeErr = &lockstore.Error{Code: lockstore.Internal, Op: "close", Msg: "bolt: close " + s.path, Err: err}
		}
	})
	return s.closeErr
}

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

// update runs fn in one durable read-write transaction (shared with
// concurrent writers, see groupCommit). The context is checked before
// queueing and again when fn runs, so a caller that gave up while queued
// behind other writers writes nothing.
func (s *Store) update(ctx context.Context, op string, fn func(*bbolt.Tx) error) error {
	if err := lockstore.ContextError(ctx, op); err != nil {
		return err
	}
	err := s.writes.update(func(tx *bbolt.Tx) error {
		if err := lockstore.ContextError(ctx, op); err != nil {
			return err
		}
		return fn(tx)
	})
	return mapErr(op, err)
}

// view runs fn in one read-only transaction.
func (s *Store) view(ctx context.Context, op string, fn func(*bbolt.Tx) error) error {
	if err := lockstore.ContextError(ctx, op); err != nil {
		return err
	}
	return mapErr(op, s.db.View(fn))
}

// mapErr turns bbolt failures into the contract's codes; *lockstore.Error
// values from inside a transaction pass through.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var le *lockstore.Error
	if errors.As(err, &le) {
		return err
	}
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: op, Msg: "bolt: store is closed", Err: err}
	}
	return &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "bolt: transaction failed", Err: err}
}
