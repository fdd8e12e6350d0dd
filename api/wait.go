package api

import (
	"context"
	"math"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// acquireWaiting retries an acquire on contention until wait has passed,
// with SyncGuard's exponential backoff and equal jitter (the zero
// RetryPolicy's strategy). The attempt count is unbounded: waitMs is a time
// budget, not a retry count. ctx is the request's, so a client that goes
// away stops the loop (Aborted) at once, mid-sleep included.
func acquireWaiting(ctx context.Context, l lockstore.Locker, key string, ttl, wait time.Duration) (lockstore.AcquireResult, error) {
	return lockstore.AcquireWithRetry(ctx, l, key, ttl, lockstore.RetryPolicy{
		MaxRetries: math.MaxInt,
		Timeout:    wait,
	})
}
