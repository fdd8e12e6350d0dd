package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
)

// A store's lock operations that always grant, for the examples.
type grant struct{}

func (grant) Acquire(_ context.Context, _ string, ttl time.Duration) (lockstore.AcquireResult, error) {
	return lockstore.AcquireResult{OK: true, LockID: "AAAAAAAAAAAAAAAAAAAAAA", Fence: "000000000000007",
		ExpiresAtMs: time.Now().Add(ttl).UnixMilli()}, nil
}
func (grant) Release(context.Context, string) (lockstore.ReleaseResult, error) {
	return lockstore.ReleaseResult{OK: true}, nil
}
func (grant) Extend(_ context.Context, _ string, ttl time.Duration) (lockstore.ExtendResult, error) {
	return lockstore.ExtendResult{OK: true, ExpiresAtMs: time.Now().Add(ttl).UnixMilli()}, nil
}

func ExampleLock() {
	var store lock.Locker = lock.FromStore(grant{}) // a backend's *Store in-process, or the client
	err := lock.Lock(context.Background(), store, "orders/42",
		func(ctx context.Context, h lock.Held) error {
			// Send writes carrying h.Fence; stop when ctx is done.
			fmt.Println("fence", h.Fence)
			return nil
		},
		lock.WithTTL(10*time.Second),
		lock.WithAutoExtend(),
		lock.WithRetry(lock.RetryPolicy{Timeout: 2 * time.Second}),
	)
	if errors.Is(err, lock.ErrLockLost) {
		fmt.Println("the work was not protected to the end")
	}
	fmt.Println("err", err)
	// Output:
	// fence 000000000000007
	// err <nil>
}

func ExampleKeepAlive() {
	ctx := context.Background()
	l := lock.FromStore(grant{})
	const ttl = 10 * time.Second
	sent := time.Now()
	r, err := l.Acquire(ctx, "orders/42", ttl)
	if err != nil || !r.OK {
		return
	}
	lease, err := lock.KeepAlive(ctx, l, lock.NewHeld("orders/42", r, sent, ttl), ttl)
	if err != nil {
		return
	}
	select {
	case <-lease.Done(): // lost: stop writing
		fmt.Println(context.Cause(lease.Context()))
	case <-time.After(10 * time.Millisecond): // the work finished
	}
	lease.Stop()
	_, _ = l.Release(ctx, r.LockID)
	fmt.Println("lost:", lease.Lost() != nil)
	// Output: lost: false
}
