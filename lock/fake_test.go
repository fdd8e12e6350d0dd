package lock

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// memStore is locktest's in-memory store as a Locker, for testing the
// helpers (Lock, KeepAlive, AcquireWithRetry): its calls are recorded and
// its hooks script failures.
type memStore struct{ *locktest.MemStore }

func newMemStore() *memStore { return &memStore{locktest.NewMemStore()} }

// Acquire makes memStore a Locker: the store's answer, as Acquired.
func (m *memStore) Acquire(ctx context.Context, key string, ttl time.Duration) (Acquired, error) {
	r, err := m.MemStore.Acquire(ctx, key, ttl)
	return Acquired{AcquireResult: r}, err
}
