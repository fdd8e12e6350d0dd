package postgres

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// TestConformance runs the cross-backend suite; every namespace gets its own
// three tables (<ns>_locks, <ns>_fences, <ns>_audit).
func TestConformance(t *testing.T) {
	databaseURL(t)
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T, ns string, o storetest.Options) (lockstore.Store, error) {
			return openNS(t, ns, func(c *Config) { c.FenceFloor, c.AuditRetention = o.FenceFloor, o.AuditRetention }), nil
		},
		SetFence: func(t *testing.T, s lockstore.Store, ns, key string, n int64) {
			setFence(t, s.(*Store), key, n)
		},
	})
}

// setFence seeds key's counter to n with an UPSERT on the fence table,
// through the same two-step key derivation the store uses.
func setFence(t testing.TB, s *Store, key string, n int64) {
	t.Helper()
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	_, fenceKey, err := storageKeys(nk)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.pool.Exec(context.Background(),
		`INSERT INTO `+ident(s.cfg.FenceTable)+` (fence_key, fence) VALUES ($1, $2)
		 ON CONFLICT (fence_key) DO UPDATE SET fence = EXCLUDED.fence`, fenceKey, n)
	if err != nil {
		t.Fatalf("seed fence: %v", err)
	}
}

// TestFenceWarning: an acquire that issues a fence past FenceWarn logs
// backend.NoteFence's warning once, with the key's hash and never the key.
func TestFenceWarning(t *testing.T) {
	s := openNS(t, testNS(t), func(c *Config) { c.FenceFloor = backend.FloorOff })
	defer s.Close()
	var buf bytes.Buffer // only this goroutine's acquire logs to it
	s.log = testutil.Logger(&buf, nil)
	const key = "tenant-7/secret-resource"
	setFence(t, s, key, lockstore.FenceWarn)
	r, err := s.Acquire(tctx(t), key, time.Second)
	if err != nil || !r.OK {
		t.Fatalf("Acquire = %+v, %v", r, err)
	}
	out := buf.String()
	if strings.Count(out, "fence counter past the warning level") != 1 ||
		!strings.Contains(out, "level=WARN") || !strings.Contains(out, "keyHash="+lockstore.HashKey(key)) {
		t.Fatalf("want one WARN line with the keyHash past FenceWarn:\n%s", out)
	}
	if strings.Contains(out, key) || strings.Contains(out, r.LockID) {
		t.Fatalf("log leaks the raw key or lockId:\n%s", out)
	}
}
