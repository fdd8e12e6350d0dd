package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/bolt"
	pgstore "github.com/fencegate/fencegate/lockstore/postgres"
	redisstore "github.com/fencegate/fencegate/lockstore/redis"
)

// lockTTL is the TTL of every measured acquire: long enough that no lock
// expires inside a cycle, the library default of both fencegate and redislock
// users.
const lockTTL = 30 * time.Second

// benchToken is the bearer token of the gateway under test. Auth stays on,
// as in any non-loopback deployment, so its cost is part of the gateway's.
const benchToken = "bench-token-6b1d0c"

// runID makes this process's Redis keys unique, so runs against a shared
// REDIS_URL never meet each other's locks or fence counters.
var runID = strconv.FormatInt(time.Now().UnixNano(), 36)

// logger is what every component under test logs to: the JSON handler a
// deployment uses, at info, writing to io.Discard. Log records are built
// and encoded as in production (access logs included), only not written.
var logger = slog.New(slog.NewJSONHandler(io.Discard, nil))

// redisURL returns REDIS_URL or fails the benchmark: the comparisons need a
// real server, and a skipped comparison would look like a finished one.
func redisURL(tb testing.TB) string {
	tb.Helper()
	return testutil.RedisURL(tb)
}

// cleanupCtx is a fresh context for teardown: tb.Context is already
// cancelled when cleanups run.
func cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// openBolt opens the embedded store on a file in a temp dir, with its
// default durability (fsync on every commit, shared by concurrent writers).
func openBolt(tb testing.TB) lockstore.Store { return openBoltFloor(tb, backend.FloorClock) }

// openBoltFloor is openBolt with the given fence floor.
func openBoltFloor(tb testing.TB, floor backend.FenceFloor) lockstore.Store {
	tb.Helper()
	return locktest.OpenBolt(tb, func(c *bolt.Config) { c.Logger, c.FenceFloor = logger, floor })
}

// openRedis opens the Redis store on REDIS_URL under a prefix of this run's
// own, and deletes every key under that prefix at cleanup (fence counters
// are never deleted by the store itself).
func openRedis(tb testing.TB) *redisstore.Store {
	tb.Helper()
	cfg, err := redisstore.ParseURL(redisURL(tb))
	if err != nil {
		tb.Fatalf("REDIS_URL: %v", err)
	}
	cfg.Prefix = "fencegate-bench-" + runID
	return openRedisConfig(tb, cfg)
}

// openRedisFloor is openRedis with the given fence floor, under a prefix of
// its own.
func openRedisFloor(tb testing.TB, floor backend.FenceFloor) *redisstore.Store {
	tb.Helper()
	cfg, err := redisstore.ParseURL(redisURL(tb))
	if err != nil {
		tb.Fatalf("REDIS_URL: %v", err)
	}
	cfg.Prefix = "fencegate-bench-" + runID + "-floor-" + floor.String()
	cfg.FenceFloor = floor
	return openRedisConfig(tb, cfg)
}

// openRedisConfig opens the Redis store with cfg (its prefix the bench's
// own) and, at cleanup, deletes every key under that prefix and closes it.
func openRedisConfig(tb testing.TB, cfg redisstore.Config) *redisstore.Store {
	tb.Helper()
	cfg.Logger = logger
	s, err := redisstore.Open(tb.Context(), cfg)
	if err != nil {
		tb.Fatalf("open redis store: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		if err := deletePrefix(ctx, s.Client(), s.Prefix()); err != nil {
			tb.Errorf("delete bench keys: %v", err)
		}
		_ = s.Close()
	})
	return s
}

// holdWorkerLocks acquires keys[w] for each worker w, held for heldTTL and
// released at cleanup, and returns the locks.
func holdWorkerLocks(tb testing.TB, store lockstore.Store, keys []string) []lockstore.AcquireResult {
	tb.Helper()
	held := make([]lockstore.AcquireResult, len(keys))
	for w, key := range keys {
		a, err := store.Acquire(tb.Context(), key, heldTTL)
		if err != nil || !a.OK {
			tb.Fatalf("acquire %s: %+v %v", key, a, err)
		}
		tb.Cleanup(func() {
			ctx, cancel := cleanupCtx()
			defer cancel()
			_, _ = store.Release(ctx, a.LockID)
		})
		held[w] = a
	}
	return held
}

// redisStoreURL is REDIS_URL with store's prefix: the store URL a child
// `fencegate` process opens to share the bench store's keys.
func redisStoreURL(tb testing.TB, store *redisstore.Store) string {
	tb.Helper()
	u, err := url.Parse(redisURL(tb))
	if err != nil {
		tb.Fatalf("REDIS_URL: %v", err)
	}
	q := u.Query()
	q.Set("prefix", store.Prefix())
	u.RawQuery = q.Encode()
	return u.String()
}

// databaseURL returns DATABASE_URL or fails the benchmark, as redisURL.
func databaseURL(tb testing.TB) string {
	tb.Helper()
	return testutil.DatabaseURL(tb)
}

// openPostgres opens the PostgreSQL store on DATABASE_URL over tables of
// this run's own, dropped at cleanup, with a pool of one connection per
// worker (the default pool would queue the 16 workers).
func openPostgres(tb testing.TB) lockstore.Store { return openPostgresFloor(tb, backend.FloorClock) }

// openPostgresFloor is openPostgres with the given fence floor.
func openPostgresFloor(tb testing.TB, floor backend.FenceFloor) lockstore.Store {
	tb.Helper()
	cfg, err := pgstore.ParseURL(databaseURL(tb))
	if err != nil {
		tb.Fatalf("DATABASE_URL: %v", err)
	}
	ns := "fgbench_" + runID
	cfg.Table, cfg.FenceTable, cfg.AuditTable, cfg.BarrierTable = ns+"_locks", ns+"_fences", ns+"_audit", ns+"_writes"
	cfg.MaxConns = int32(max(*workers, 4))
	cfg.Logger = logger
	cfg.FenceFloor = floor
	s, err := pgstore.Open(tb.Context(), cfg)
	if err != nil {
		tb.Fatalf("open postgres store: %v", err)
	}
	tb.Cleanup(func() {
		_ = s.Close()
		ctx, cancel := cleanupCtx()
		defer cancel()
		conn, err := pgx.Connect(ctx, cfg.DSN)
		if err != nil {
			tb.Errorf("drop bench tables: %v", err)
			return
		}
		defer conn.Close(ctx)
		for _, t := range []string{cfg.Table, cfg.FenceTable, cfg.AuditTable, cfg.BarrierTable} {
			if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{t}.Sanitize()); err != nil {
				tb.Errorf("drop %s: %v", t, err)
			}
		}
	})
	return s
}

// deletePrefix removes every key starting with prefix.
func deletePrefix(ctx context.Context, c *goredis.Client, prefix string) error {
	// Exactly the store's two key spaces (SyncGuard's "<prefix>:" and its
	// own "<prefix>.fencegate:"), not every key that merely starts with
	// prefix.
	var keys []string
	for _, pattern := range []string{prefix + ":*", prefix + ".fencegate:*"} {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("scan: %w", err)
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
			return fmt.Errorf("del: %w", err)
		}
		keys = keys[n:]
	}
	return nil
}

// workerKeys returns one lock key per worker, distinct per subject, so no
// two workers (and no two subjects) ever contend for a key.
func workerKeys(id string, nw int) []string {
	keys := make([]string, nw)
	for w := range keys {
		keys[w] = fmt.Sprintf("bench/%s/w%d", id, w)
	}
	return keys
}

// cycler is the part of a lock API one acquire+release cycle needs; the
// store (lock.FromStore), the HTTP client and the gRPC adapter all have it.
type cycler interface {
	Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Acquired, error)
	Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error)
}

// cycle is the lock benchmarks' op: acquire worker w's key, release it.
// Both must succeed: a "locked" or a failed release means the benchmark is
// measuring something else than an uncontended cycle.
func cycle(c cycler, keys []string) op {
	return func(ctx context.Context, w int) error {
		a, err := c.Acquire(ctx, keys[w], lockTTL)
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		if !a.OK {
			return fmt.Errorf("acquire: not acquired (%s) on a key no one else uses", a.Reason)
		}
		r, err := c.Release(ctx, a.LockID)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		if !r.OK {
			return fmt.Errorf("release: lock just acquired was not held (%s)", r.Detail)
		}
		return nil
	}
}

// gateway is one lockserver.Server over a store, served on real loopback
// listeners, with a client for each transport.
type gateway struct {
	http *client.Client
	grpc *client.GRPCClient
}

// startGateway serves store through lockserver.Server on an HTTP listener and a gRPC
// listener, both on 127.0.0.1, and returns clients for both. Everything is
// stopped at cleanup.
func startGateway(tb testing.TB, store lockstore.Store, nw int) gateway {
	tb.Helper()
	authn, err := auth.NewAuthenticator([]auth.Token{{
		Name: "bench", SHA256: auth.HashToken(benchToken), Prefixes: []string{"bench/"},
	}})
	if err != nil {
		tb.Fatalf("authenticator: %v", err)
	}
	// Registerer nil: each server keeps its metrics in a private registry
	// (still counted per request), so two gateways in one process coexist.
	srv, err := lockserver.New(lockserver.Options{Store: store, Auth: authn, Logger: logger})
	if err != nil {
		tb.Fatalf("lockserver.New: %v", err)
	}

	// cmd/fencegate's listeners (listen_test.go), as the transport floors
	// run on.
	return gateway{
		http: httpClient(tb, serveHTTP(tb, srv.Handler()), nw),
		grpc: grpcClient(tb, listenGRPC(tb, srv.RegisterGRPC)),
	}
}

// httpClient is the lock API's HTTP client on base, with the bench token
// and one idle connection per worker: net/http's default of two per host
// would make the other workers dial a fresh connection per request.
func httpClient(tb testing.TB, base string, nw int) *client.Client {
	tb.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = nw
	tr.MaxIdleConns = nw
	tb.Cleanup(tr.CloseIdleConnections)
	hc, err := client.New(base, client.WithToken(benchToken), client.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		tb.Fatalf("client.New: %v", err)
	}
	return hc
}

// grpcClient is the lock API's gRPC client on addr, with the bench token:
// one connection the workers share, as a proxy's would be.
func grpcClient(tb testing.TB, addr string) *client.GRPCClient {
	tb.Helper()
	gc, err := client.NewGRPC(addr, client.WithToken(benchToken))
	if err != nil {
		tb.Fatalf("client.NewGRPC: %v", err)
	}
	tb.Cleanup(func() { _ = gc.Close() })
	return gc
}
