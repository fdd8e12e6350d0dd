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
// Timing: the store's time authority is this process (Config.Now), so the
// suite gives every case a fake clock of its own and moves it instead of
// sleeping; no ExtraClockMargin is needed.
// The concurrency case is scaled down because the emulator serialises
// conflicting transactions with a lock wait of about two seconds.
func TestConformance(t *testing.T) {
	needEmulator(t)
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T, ns string, o storetest.Options) (lockstore.Store, error) {
			cfg := nsConfig(t, ns)
			cfg.FenceFloor, cfg.AuditRetention = o.FenceFloor, o.AuditRetention
			if o.Now != nil {
				cfg.Now = o.Now
			}
			return Open(context.Background(), cfg)
		},
		SetFence: func(t *testing.T, s lockstore.Store, ns, key string, n int64) {
			setFence(t, s.(*Store), key, n)
		},
		ConcurrencyScale: 0.25,
	})
}
