// Package bolttest opens real embedded (bolt) stores for tests, in a
// temporary directory, closed at cleanup. It is apart from testutil only
// because it imports lockstore/bolt, which lockstore's and bolt's own tests
// (users of testutil) cannot import back. Tests only, like testutil.
package bolttest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/bolt"
)

// Open opens a bolt store on a fresh file in tb's temporary directory,
// configured as production opens it but with a discarding logger; edit, if
// given, changes the Config first (FloorOff, Logger, Path, ...). The store
// is closed at cleanup.
func Open(tb testing.TB, edit ...func(*bolt.Config)) *bolt.Store {
	tb.Helper()
	cfg := bolt.Config{
		Path:   filepath.Join(tb.TempDir(), "fence.db"),
		Logger: slog.New(slog.DiscardHandler),
	}
	for _, e := range edit {
		e(&cfg)
	}
	// Not tb.Context(): the store outlives the test body into cleanups.
	s, err := bolt.Open(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("open bolt store %s: %v", cfg.Path, err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// FloorOff is an edit for Open: consecutive fences (1, 2, 3, ...), for
// tests that count them.
func FloorOff(c *bolt.Config) { c.FenceFloor = lockstore.FloorOff }
