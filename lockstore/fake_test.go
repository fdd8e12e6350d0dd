package lockstore_test

import (
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// memStore is locktest's in-memory Store, for testing the helpers
// (As): its calls are recorded and its hooks script
// failures.
type memStore = locktest.MemStore

var newMemStore = locktest.NewMemStore
