package firestore

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// TestConformance runs the cross-backend suite against the emulator. Each
// storetest namespace becomes a suffix of all three collection names, so
// cases running in parallel never share a document, and reopening a
// namespace reaches the same data.
//
// Timing: the store's time authority is this process's clock (time.Now),
// the same clock the suite measures with, so no ExtraClockMargin is needed.
// The concurrency case is scaled down because the emulator serialises
// conflicting transactions with a lock wait of about two seconds.
func TestConformance(t *testing.T) {
	needEmulator(t)
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T, ns string) lockstore.Store {
			s, err := Open(context.Background(), nsConfig(t, ns))
			if err != nil {
				t.Fatalf("Open(%s): %v", ns, err)
			}
			return s
		},
		OpenFloorOff: func(t *testing.T, ns string) lockstore.Store {
			cfg := nsConfig(t, ns)
			cfg.FenceFloor = lockstore.FloorOff
			s, err := Open(context.Background(), cfg)
			if err != nil {
				t.Fatalf("Open(%s): %v", ns, err)
			}
			return s
		},
		OpenAudit: func(t *testing.T, ns string, r lockstore.AuditRetention) lockstore.Store {
			cfg := nsConfig(t, ns)
			cfg.AuditRetention = r
			s, err := Open(context.Background(), cfg)
			if err != nil {
				t.Fatalf("Open(%s): %v", ns, err)
			}
			return s
		},
		SetFence: func(t *testing.T, s lockstore.Store, ns, key string, n int64) {
			setFence(t, s.(*Store), key, n)
		},
		ConcurrencyScale: 0.25,
	})
}
