package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Store is a lockstore.Store and lockstore.AuditLog over one Redis database
// (a single server, or a master found through Sentinel). It is safe for
// concurrent use.
type Store struct {
	client  goredis.UniversalClient
	single  *goredis.Client        // the client on one server or Sentinel, else nil
	cluster *goredis.ClusterClient // the client on a cluster, else nil
	layout  Layout                 // LayoutSyncGuard or LayoutCluster (cluster.go)
	d       *dispatcher            // runs every lock script (dispatch.go); on a cluster, those whose master is not known
	// nodeD (cluster only) is one dispatcher per master address
	// (dispatcherFor), so that a shard that hangs holds up only its own
	// keys' calls, never another shard's in the same pipeline.
	nodeMu sync.Mutex
	nodeD  map[string]*dispatcher
	closed bool
	prefix string
	// idPrefix is the prefix of lockId index keys when they are not hashed,
	// else ""; under the cluster layout each tag has its own (idPrefixOf).
	idPrefix string
	// audit holds the audit streams, one pair per shard: decision class
	// (ownKey(auditStreamName)) and input class; one pair in SyncGuard's
	// layout, auditShards under the cluster layout.
	audit     [][2]string
	auditNext atomic.Uint32 // the shard the next append batch goes to
	// untagged (tests only) drops the hash tags from the cluster layout's
	// key names: the broken variant TestClusterWithoutHashTags runs.
	untagged bool
	// oneDispatcher (tests only) sends every cluster call through s.d:
	// the broken variant TestClusterShardStall runs.
	oneDispatcher bool
	// waitAnywhere (tests only) sends an acknowledged acquire through the
	// cluster client's pipeline, where WAIT (keyless) lands on any master:
	// the broken variant TestClusterAckOnKeyMaster runs.
	waitAnywhere bool
	// noRetry (tests only) makes the dispatchers created from now on skip
	// their cluster retry: the broken variant TestClusterMigrationRetry runs.
	noRetry  bool
	cleanup  bool
	floorArg string // the acquire script's floor argument: "1" (FloorClock) or "0"
	// ackReplicas > 0: acquires wait for that many replicas (ack.go).
	ackReplicas int64
	ackTimeout  time.Duration
	retention   lockstore.AuditRetention
	log         *slog.Logger

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
	layout, err := cfg.effectiveLayout()
	if err != nil {
		return nil, err
	}
	prefix, err := normalizePrefix(cfg.Prefix, layout)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	s := &Store{
		layout:      layout,
		prefix:      prefix,
		cleanup:     cfg.CleanupInIsLocked,
		retention:   cfg.AuditRetention.WithDefaults(),
		floorArg:    floorArg(cfg.FenceFloor),
		ackReplicas: int64(cfg.AckReplicas),
		ackTimeout:  orDefault(cfg.AckTimeout, DefaultAckTimeout),
		log:         logger.With("store", "redis"),
	}
	s.audit = [][2]string{{s.ownKey(auditStreamName), s.ownKey(auditInputStreamName)}}
	if layout == LayoutCluster {
		s.audit = s.audit[:0]
		for _, tag := range auditShardTags {
			s.audit = append(s.audit, [2]string{s.ownKey("{" + tag + "}:" + auditStreamName), s.ownKey("{" + tag + "}:" + auditInputStreamName)})
		}
	}
	// The IsLocked cleanup derives index keys inside the script, which only
	// works while they are plain prefix:id:<lockId>; a prefix long enough to
	// hash them leaves their removal to their own TTL. (The cluster layout
	// refuses such prefixes.)
	probe := strings.Repeat("A", lockstore.LockIDLength)
	if k, err := backend.MakeStorageKey(prefix, "id:"+probe, backend.RedisKeyLimit, backend.RedisKeyReserve); err == nil && k == prefix+":id:"+probe {
		s.idPrefix = prefix + ":id:"
	}

	var readTimeout time.Duration // the options applied the default
	opts, fo := cfg.clientOptions()
	var co *goredis.ClusterOptions
	switch {
	case cfg.Cluster != nil:
		co = cfg.clusterOptions()
		readTimeout = co.ReadTimeout
	case fo != nil:
		readTimeout = fo.ReadTimeout
	default:
		readTimeout = opts.ReadTimeout
	}
	if s.ackReplicas > 0 && (s.ackTimeout < time.Millisecond || (readTimeout > 0 && s.ackTimeout >= readTimeout)) {
		// WAIT's timeout is whole milliseconds (0 blocks for good), and the
		// connection's read deadline must outlast it.
		return nil, invalidConfig("ackTimeout %s must be at least 1ms and below the read timeout (%s)", s.ackTimeout, readTimeout)
	}
	switch {
	case co != nil:
		s.cluster = goredis.NewClusterClient(co)
		s.client = s.cluster
	case fo != nil:
		s.single = goredis.NewFailoverClient(fo)
		s.client = s.single
	default:
		s.single = goredis.NewClient(opts)
		s.client = s.single
	}
	if err := s.openChecks(ctx); err != nil {
		_ = s.client.Close()
		return nil, err
	}
	s.d = s.newDispatcher()
	s.log.Info("redis lock store opened", "config", cfg.String())
	return s, nil
}

// openChecks pings the server (every master of a cluster), checks its
// eviction policy and loads the scripts.
func (s *Store) openChecks(ctx context.Context) error {
	const op = "open"
	if s.cluster != nil {
		// The first call fetches the slot map; every master must answer
		// at Open, which is what an operator deploying expects to be told.
		if err := s.cluster.Ping(ctx).Err(); err != nil {
			return classify(ctx, op, fmt.Errorf("ping: %w", err))
		}
	}
	if err := s.eachMaster(ctx, func(c *goredis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		return classify(ctx, op, fmt.Errorf("ping: %w", err))
	}
	if err := s.checkEviction(ctx); err != nil {
		return err
	}
	// Loading up front makes the first EVALSHA of each script hit; Run still
	// falls back to EVAL if the cache is flushed later (or a replica that
	// never loaded them is promoted).
	err := s.eachMaster(ctx, func(c *goredis.Client) error {
		pipe := c.Pipeline()
		loads := make([]*goredis.StringCmd, len(allScripts))
		for i, sc := range allScripts {
			loads[i] = pipe.ScriptLoad(ctx, sc.src)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return classify(ctx, op, fmt.Errorf("script load: %w", err))
		}
		for i, sc := range allScripts {
			if got := loads[i].Val(); got != sc.Hash() {
				return lockstore.Errorf(lockstore.Internal, op, "server digest %q of a script differs from ours %q", got, sc.Hash())
			}
		}
		return nil
	})
	if err != nil {
		return classify(ctx, op, err)
	}
	if s.layout == LayoutCluster {
		return nil // no earlier version wrote this layout
	}
	moved, err := s.moveLegacyAudit(ctx)
	if err != nil {
		return err
	}
	if moved {
		s.log.Info("redis audit stream moved to its own key", "from", s.legacyAuditKey(), "to", s.audit[0][0])
	}
	return nil
}

// eval runs one of the lock scripts through the dispatcher: one atomic
// script, sent alone or in a pipeline with other callers' scripts.
func (s *Store) eval(ctx context.Context, sc script, keys []string, args ...any) *goredis.Cmd {
	return s.dispatcherFor(ctx, keys).run(ctx, sc, keys, args...)
}

// Client returns the underlying go-redis client on one server or Sentinel,
// nil on a cluster (for tests and tooling).
func (s *Store) Client() *goredis.Client { return s.single }

// Universal returns the underlying go-redis client, a *goredis.Client or a
// *goredis.ClusterClient (for tests and tooling).
func (s *Store) Universal() goredis.UniversalClient { return s.client }

// Layout returns the key layout in use: LayoutSyncGuard or LayoutCluster.
func (s *Store) Layout() Layout { return s.layout }

// Prefix returns the key prefix in use.
func (s *Store) Prefix() string { return s.prefix }

// Capabilities reports Redis on server time (Redis TIME).
func (s *Store) Capabilities() lockstore.Capabilities {
	return lockstore.Capabilities{Backend: "redis", TimeAuthority: lockstore.ServerTime}
}

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	ping := func() error { return s.client.Ping(ctx).Err() }
	if s.cluster != nil {
		ping = func() error { return s.pingCluster(ctx) }
	}
	if err := ping(); err != nil {
		return classify(ctx, "ping", err)
	}
	return nil
}

// Close lets the scripts already queued run, then closes the connection
// pool; calls after Close fail. With Redis unreachable it waits for the
// round trips in flight to end, at the latest when their callers'
// deadlines (or the read timeout) pass. Locks stay in Redis until they expire. It
// is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.d.close()
		s.nodeMu.Lock()
		s.closed = true
		for _, d := range s.nodeD {
			d.close()
		}
		s.nodeMu.Unlock()
		if err := s.client.Close(); err != nil {
			s.closeErr = classify(context.Background(), "close", err)
		}
	})
	return s.closeErr
}

// checkEviction refuses a Redis that may evict keys without a TTL: fence
// counters have none, and an evicted counter starts again at 1, so fences
// would repeat. volatile-* policies evict only keys with a TTL (locks, which
// expire early then; the fences still protect), so they get a warning. A
// Redis that denies CONFIG (managed services often do) is logged and
// trusted: its operator must keep maxmemory-policy at noeviction.
func (s *Store) checkEviction(ctx context.Context) error {
	return s.eachMaster(ctx, func(c *goredis.Client) error { return s.checkEvictionOn(ctx, c) })
}

func (s *Store) checkEvictionOn(ctx context.Context, c *goredis.Client) error {
	const op = "open"
	res, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
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

func floorArg(f backend.FenceFloor) string {
	if f == backend.FloorOff {
		return "0"
	}
	return "1"
}
