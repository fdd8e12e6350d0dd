package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/bsm/redislock"

	"github.com/fencegate/fencegate/lock"
)

// BenchmarkRedisPeer: the Redis store's acquire+release cycle against the
// peer the design names, github.com/bsm/redislock (Obtain+Release), on the
// same Redis through the same go-redis client and connection pool. Both
// make two calls per cycle; fencegate's scripts also issue a fence (INCR of
// a counter that is never deleted), write the lockId index and keep
// SyncGuard's JSON value, and fencegate sends concurrent callers' scripts
// as pipelines (lockstore/redis/dispatch.go) where redislock sends each
// call alone: the ratio prices both.
func BenchmarkRedisPeer(b *testing.B) { runSuite(b, peerSuite) }

// peerSuite runs the peer first, then fencegate.
func peerSuite(tb testing.TB, nw int) []subject {
	store := openRedis(tb)
	// The store's own client (same options, same pool); redislock's keys go
	// under the run's prefix so the cleanup removes them too.
	locker := redislock.New(store.Client())
	peerKeys := make([]string, nw)
	for w := range peerKeys {
		peerKeys[w] = fmt.Sprintf("%s:peer/redislock/w%d", store.Prefix(), w)
	}
	redislockCycle := func(ctx context.Context, w int) error {
		l, err := locker.Obtain(ctx, peerKeys[w], lockTTL, nil)
		if err != nil {
			if errors.Is(err, redislock.ErrNotObtained) {
				return fmt.Errorf("obtain: not obtained on a key no one else uses: %w", err)
			}
			return fmt.Errorf("obtain: %w", err)
		}
		if err := l.Release(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}
	return []subject{
		{id: "peer/redislock", unit: "cycles/s", op: redislockCycle, redis: store.Client()},
		{id: "peer/fencegate-redis", unit: "cycles/s", op: cycle(lock.FromStore(store), workerKeys("peer/fencegate-redis", nw)), redis: store.Client()},
	}
}
