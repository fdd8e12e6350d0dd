// Package lock is the lock holder's side of fencegate: running work under a
// lock (Lock: retry with backoff and jitter, auto-extend, always release),
// keeping a held lock alive (KeepAlive, Lease, Held), and retrying an
// acquire under contention (RetryPolicy, AcquireWithRetry).
//
// It runs over a Locker: fencegate's network client (package client), or a
// backend's lock operations in-process (FromStore). The backend contract
// (what a store implements, its results and errors) is package lockstore;
// errors here are *lockstore.Error values with its codes.
//
//	err := lock.Lock(ctx, c, "orders/42", func(ctx context.Context, h lock.Held) error {
//		// ctx is cancelled the moment the lock is lost; writes carry h.Fence.
//		return nil
//	}, lock.WithAutoExtend())
package lock
