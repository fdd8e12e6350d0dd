package firestore

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/lockstore"
)

// Store is the Firestore lock store. It implements lockstore.Store,
// lockstore.AuditLog and lockstore.HeldCounter. It is safe for concurrent
// use.
type Store struct {
	cfg    Config
	client *firestore.Client
	locks  *firestore.CollectionRef
	fences *firestore.CollectionRef
	audit  *firestore.CollectionRef // decision-class audit events
	input  *firestore.CollectionRef // input-class audit events (inputCollection)
	log    *slog.Logger

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	inflight *keyLocks // per-document serialisation of our own transactions
}

var (
	_ lockstore.Store       = (*Store)(nil)
	_ lockstore.AuditLog    = (*Store)(nil)
	_ lockstore.HeldCounter = (*Store)(nil)
)

// Open validates cfg and creates a Firestore client. It does not contact
// Firestore (the client connects lazily); call Ping to check reachability.
// With FIRESTORE_EMULATOR_HOST set, the client library talks to the
// emulator without credentials.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var (
		client *firestore.Client
		err    error
	)
	if cfg.DatabaseID == "" {
		client, err = firestore.NewClient(ctx, cfg.ProjectID, cfg.ClientOptions...)
	} else {
		client, err = firestore.NewClientWithDatabase(ctx, cfg.ProjectID, cfg.DatabaseID, cfg.ClientOptions...)
	}
	if err != nil {
		return nil, classify(ctx, "open", err)
	}
	s := &Store{
		cfg:    cfg,
		client: client,
		locks:  client.Collection(cfg.Collection),
		fences: client.Collection(cfg.FenceCollection),
		audit:  client.Collection(cfg.AuditCollection),
		input:  client.Collection(inputCollection(cfg.AuditCollection)),
		log:    cfg.Logger.With("backend", "firestore"),

		inflight: newKeyLocks(),
	}
	s.log.Debug("firestore store opened",
		"project", cfg.ProjectID, "database", cfg.DatabaseID,
		"collection", cfg.Collection, "fence_collection", cfg.FenceCollection,
		"audit_collection", cfg.AuditCollection,
		"emulator", os.Getenv("FIRESTORE_EMULATOR_HOST"))
	return s, nil
}

// Capabilities reports Firestore on client time (the gateway's clock).
func (s *Store) Capabilities() lockstore.Capabilities {
	return lockstore.Capabilities{Backend: "firestore", TimeAuthority: lockstore.ClientTime}
}

// Close closes the client. It is idempotent; locks are not released.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.closeErr = s.client.Close()
	})
	return s.closeErr
}

// nowMs reads the time authority, the gateway's clock.
func (s *Store) nowMs() int64 { return s.cfg.Now().UnixMilli() }

// begin is the common preamble of every operation: a closed store or a
// finished context fails before any I/O.
func (s *Store) begin(ctx context.Context, op string) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return ctx, func() {}, lockstore.Errorf(lockstore.ServiceUnavailable, op, "store is closed")
	}
	if ce := lockstore.ContextError(ctx, op); ce != nil {
		return ctx, func() {}, ce
	}
	// The client library retries UNAVAILABLE until the context ends, so an
	// unreachable Firestore would hold a caller without a deadline forever.
	// Bound every operation; classify reports our bound as
	// ServiceUnavailable, the caller's own deadline as NetworkTimeout.
	bctx, cancel := context.WithTimeoutCause(ctx, s.cfg.OpTimeout, errOpTimeout)
	return bctx, cancel, nil
}

// checkpoint is the spec's checkAborted: a cancelled or expired context
// stops a transaction function between its reads and its writes.
func checkpoint(ctx context.Context, op string) error {
	if ce := lockstore.ContextError(ctx, op); ce != nil {
		return ce
	}
	return nil
}

// Ping reads one (normally absent) counter document: it proves the
// database is reachable and the credentials may read, and writes nothing.
func (s *Store) Ping(ctx context.Context) error {
	const op = "ping"
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer cancel()
	_, err = s.fences.Doc("fencegate-ping").Get(ctx)
	if status.Code(err) == codes.NotFound {
		err = nil
	}
	return classify(ctx, op, err)
}
