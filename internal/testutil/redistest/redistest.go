// Package redistest opens the Redis store on the throwaway server
// scripts/testenv starts (REDIS_URL), for the tests of packages above the
// backends (fencecheck, proxy). It is apart from locktest because
// lockstore/redis's own tests import locktest and could not import a
// package that imports lockstore/redis back. Tests only, like testutil.
package redistest

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/redis"
)

// Open opens the Redis store on REDIS_URL under prefix; two calls with the
// same prefix are two gateway replicas (two connections) on one store. A
// test without REDIS_URL fails, never skips. The store is closed at
// cleanup.
func Open(tb testing.TB, prefix string) lockstore.Store {
	tb.Helper()
	cfg, err := redis.ParseURL(testutil.RedisURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Prefix = prefix
	// Not tb.Context(): the store outlives the test body into cleanups.
	s, err := redis.Open(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}
