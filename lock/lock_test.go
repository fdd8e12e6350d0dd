package lock

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

var quiet = KeepAliveLogger(slog.New(slog.DiscardHandler))

func TestLockRunsAndReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		var got Held
		err := Lock(context.Background(), m, "resource:123", func(ctx context.Context, h Held) error {
			got = h
			if m.Holder("resource:123") != h.LockID {
				t.Error("fn runs without holding the lock")
			}
			if ctx.Err() != nil {
				t.Error("fn's context is already done")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got.Key != "resource:123" || lockstore.ValidateLockID(got.LockID) != nil || got.Fence != "000000000000001" {
			t.Errorf("Held = %+v", got)
		}
		if want := time.Now().Add(lockstore.DefaultTTL).UnixMilli(); got.ExpiresAtMs() != want {
			t.Errorf("ExpiresAtMs = %d, want %d (now + default TTL)", got.ExpiresAtMs(), want)
		}
		if len(m.Releases()) != 1 || m.Releases()[0].LockID != got.LockID || m.Holder("resource:123") != "" {
			t.Errorf("release calls %+v; lock still held: %v", m.Releases(), m.Holder("resource:123") != "")
		}
	})
}

func TestLockFnErrorWinsOverReleaseError(t *testing.T) {
	m := newMemStore()
	releaseErr := &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: "release"}
	m.OnRelease = func(context.Context, string) (lockstore.ReleaseResult, error, bool) {
		return lockstore.ReleaseResult{}, releaseErr, true
	}
	fnErr := errors.New("work failed")
	var (
		handled   error
		handledID string
		lockID    string
	)
	err := Lock(context.Background(), m, "k", func(_ context.Context, h Held) error {
		lockID = h.LockID
		return fnErr
	}, WithReleaseErrorHandler(func(err error, h Held) { handled, handledID = err, h.LockID }))
	if err != fnErr {
		t.Errorf("Lock = %v, want fn's error unchanged", err)
	}
	if handled != releaseErr || handledID != lockID {
		t.Errorf("handler got (%v, %q), want the release error and the lock", handled, handledID)
	}

	// Without a handler the release error is ignored and fn's nil stands.
	if err := Lock(context.Background(), m, "k2", func(context.Context, Held) error { return nil }); err != nil {
		t.Errorf("release error leaked into the result: %v", err)
	}
	// A panicking handler does not break Lock.
	err = Lock(context.Background(), m, "k3", func(context.Context, Held) error { return nil },
		WithReleaseErrorHandler(func(error, Held) { panic("handler bug") }))
	if err != nil {
		t.Errorf("panicking handler: %v", err)
	}
}

func TestLockReleasesOnPanic(t *testing.T) {
	m := newMemStore()
	var lockID string
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the original panic", r)
			}
		}()
		_ = Lock(context.Background(), m, "k", func(_ context.Context, h Held) error {
			lockID = h.LockID
			panic("boom")
		})
		t.Error("Lock returned instead of panicking")
	}()
	if len(m.Releases()) != 1 || m.Releases()[0].LockID != lockID || m.Holder("k") != "" {
		t.Errorf("lock not released after panic: %+v", m.Releases())
	}
}

func TestLockReleasesWithFreshContextAfterCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		err := Lock(ctx, m, "k", func(fctx context.Context, _ Held) error {
			cancel()
			<-fctx.Done()
			return fctx.Err()
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrLockLost) {
			t.Errorf("Lock = %v, want fn's context.Canceled and no lost lock", err)
		}
		if len(m.Releases()) != 1 || m.Releases()[0].CtxErr != nil || m.Holder("k") != "" {
			t.Errorf("release %+v: want one release on a live context", m.Releases())
		}
	})
}

func TestLockReleaseTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		m.OnRelease = func(ctx context.Context, _ string) (lockstore.ReleaseResult, error, bool) {
			<-ctx.Done() // a backend that never answers
			return lockstore.ReleaseResult{}, errors.New("driver: i/o timeout"), true
		}
		var handled error
		start := time.Now()
		err := Lock(context.Background(), m, "k", func(context.Context, Held) error { return nil },
			WithReleaseTimeout(200*time.Millisecond), WithReleaseErrorHandler(func(e error, _ Held) { handled = e }))
		if err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el != 200*time.Millisecond {
			t.Errorf("Lock took %v, want the 200ms release bound", el)
		}
		if lockstore.CodeOf(handled) != lockstore.NetworkTimeout {
			t.Errorf("handler got %v, want NetworkTimeout", handled)
		}
	})
}

func TestLockAcquireFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		alwaysHeld(m)
		called := false
		err := Lock(context.Background(), m, "k", func(context.Context, Held) error { called = true; return nil },
			WithRetry(RetryPolicy{MaxRetries: 2, Jitter: JitterNone}))
		if lockstore.CodeOf(err) != lockstore.AcquisitionTimeout || called || len(m.Acquires()) != 3 || len(m.Releases()) != 0 {
			t.Errorf("err %v, fn called %v, %d acquires, %d releases", err, called, len(m.Acquires()), len(m.Releases()))
		}
	})
}

func TestLockRejectsBadOptionsBeforeAcquiring(t *testing.T) {
	fn := func(context.Context, Held) error { return nil }
	cases := map[string][]LockOption{
		"zero ttl":              {WithTTL(0)},
		"sub-ms ttl":            {WithTTL(1500 * time.Microsecond)},
		"bad retry":             {WithRetry(RetryPolicy{Backoff: "linear"})},
		"extend fraction 1.5":   {WithAutoExtend(ExtendAt(1.5))},
		"extend fraction 0":     {WithAutoExtend(ExtendAt(0))},
		"margin past the slack": {WithTTL(time.Second), WithAutoExtend(LossMargin(600 * time.Millisecond))},
		"zero release timeout":  {WithReleaseTimeout(0)},
	}
	for name, opts := range cases {
		m := newMemStore()
		if err := Lock(context.Background(), m, "k", fn, opts...); lockstore.CodeOf(err) != lockstore.InvalidArgument || len(m.Acquires()) != 0 {
			t.Errorf("%s: err %v after %d acquires", name, err, len(m.Acquires()))
		}
	}
	if err := Lock(context.Background(), newMemStore(), "k", nil); lockstore.CodeOf(err) != lockstore.InvalidArgument {
		t.Errorf("nil fn: %v", err)
	}
}

func TestLockWithoutAutoExtendCancelsAtExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		start := time.Now()
		var cancelledAfter time.Duration
		err := Lock(context.Background(), m, "k", func(ctx context.Context, _ Held) error {
			<-ctx.Done()
			cancelledAfter = time.Since(start)
			var le *LockLostError
			if !errors.As(context.Cause(ctx), &le) || le.Reason != LostExpired {
				t.Errorf("cause = %v, want LostExpired", context.Cause(ctx))
			}
			return nil // work that ignores the loss
		}, WithTTL(time.Second))
		// TTL 1s less the 100ms margin.
		if cancelledAfter != 900*time.Millisecond {
			t.Errorf("fn cancelled after %v, want 900ms", cancelledAfter)
		}
		if !errors.Is(err, ErrLockLost) {
			t.Errorf("Lock = %v, want ErrLockLost: fn's work outlived the lock", err)
		}
		if n := len(m.Extends()); n != 0 {
			t.Errorf("%d extends without auto-extend", n)
		}
	})
}

func TestLockAutoExtendKeepsLockPastTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		const ttl = time.Second
		var extended atomic.Int64
		err := Lock(context.Background(), m, "k", func(ctx context.Context, h Held) error {
			first := h.ExpiresAtMs()
			// Work for 10 TTLs, checking that nobody else can take the key.
			for i := range 20 {
				select {
				case <-ctx.Done():
					t.Fatalf("lock lost after %d half-TTLs: %v", i, context.Cause(ctx))
				case <-time.After(ttl / 2):
				}
				r, err := m.Acquire(context.Background(), "k", ttl)
				if err != nil || r.OK {
					t.Fatalf("a rival acquired the key at step %d: %+v %v", i, r, err)
				}
			}
			// Stop between two extends, so the count below is exact.
			time.Sleep(ttl / 4)
			if h.ExpiresAtMs() <= first+9000 {
				t.Errorf("ExpiresAtMs moved from %d to %d; Held does not see the extends", first, h.ExpiresAtMs())
			}
			return nil
		}, WithTTL(ttl), WithAutoExtend(quiet, OnExtend(func(Held) { extended.Add(1) })))
		if err != nil {
			t.Fatal(err)
		}
		// One extend per half TTL over 10.25 s.
		if n := extended.Load(); n != 20 {
			t.Errorf("%d extends in 10.25s at TTL/2, want 20", n)
		}
		if got := offsets(m.Extends())[:3]; !equalInts(got, []int64{0, 500, 1000}) {
			t.Errorf("extends at %v ms from the first, want every 500ms", got)
		}
		if m.Holder("k") != "" {
			t.Error("lock not released after fn")
		}
	})
}

func TestLockAutoExtendLoss(t *testing.T) {
	svcDown := &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: "extend"}
	tests := []struct {
		name string
		// extend scripts the n-th extend; handled=false runs the real one.
		extend     func(ctx context.Context, n int) (lockstore.ExtendResult, error, bool)
		steal      bool          // drop the lock at 200ms, as an expiry would
		wantAfter  time.Duration // when fn's ctx is cancelled, from acquire
		wantReason LostReason
		wantCode   lockstore.Code // of the extend error in the cause, if any
	}{
		{name: "extend answers ok=false", steal: true, wantAfter: 500 * time.Millisecond, wantReason: LostNotHeld},
		{name: "extend fails with a permanent error",
			extend: func(context.Context, int) (lockstore.ExtendResult, error, bool) {
				return lockstore.ExtendResult{}, &lockstore.Error{Code: lockstore.AuthFailed, Op: "extend"}, true
			},
			wantAfter: 500 * time.Millisecond, wantReason: LostExtendError, wantCode: lockstore.AuthFailed},
		{name: "transient errors until the loss deadline",
			extend: func(context.Context, int) (lockstore.ExtendResult, error, bool) {
				return lockstore.ExtendResult{}, svcDown, true
			},
			wantAfter: 900 * time.Millisecond, wantReason: LostExpired},
		{name: "extend hangs",
			extend: func(ctx context.Context, _ int) (lockstore.ExtendResult, error, bool) {
				<-ctx.Done()
				return lockstore.ExtendResult{}, lockstore.ContextError(ctx, "extend"), true
			},
			wantAfter: 900 * time.Millisecond, wantReason: LostExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMemStore()
				if tt.extend != nil {
					m.OnExtend = func(ctx context.Context, n int, _ string) (lockstore.ExtendResult, error, bool) {
						return tt.extend(ctx, n)
					}
				}
				start := time.Now()
				if tt.steal {
					time.AfterFunc(200*time.Millisecond, func() { m.Drop("k") })
				}
				var after time.Duration
				var cause error
				err := Lock(context.Background(), m, "k", func(ctx context.Context, _ Held) error {
					<-ctx.Done()
					after, cause = time.Since(start), context.Cause(ctx)
					return ctx.Err()
				}, WithTTL(time.Second), WithAutoExtend(quiet))
				if after != tt.wantAfter {
					t.Errorf("fn cancelled after %v, want %v", after, tt.wantAfter)
				}
				var le *LockLostError
				if !errors.As(cause, &le) || le.Reason != tt.wantReason || !errors.Is(cause, ErrLockLost) {
					t.Fatalf("cause = %v, want a %s LockLostError", cause, tt.wantReason)
				}
				if tt.wantCode != "" && lockstore.CodeOf(le.Err) != tt.wantCode {
					t.Errorf("cause carries %v, want code %s", le.Err, tt.wantCode)
				}
				if tt.steal && le.Detail != lockstore.DetailNotFound {
					t.Errorf("detail %q, want the backend's %q", le.Detail, lockstore.DetailNotFound)
				}
				// fn's own error is kept and the loss is visible in it.
				if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrLockLost) {
					t.Errorf("Lock = %v, want fn's error joined with the loss", err)
				}
				if len(m.Releases()) != 1 {
					t.Errorf("%d releases, want 1 even after a loss", len(m.Releases()))
				}
			})
		})
	}
}

func TestLockAutoExtendRetriesTransientErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		m.OnExtend = func(_ context.Context, n int, _ string) (lockstore.ExtendResult, error, bool) {
			if n <= 2 {
				return lockstore.ExtendResult{}, &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: "extend"}, true
			}
			return lockstore.ExtendResult{}, nil, false
		}
		err := Lock(context.Background(), m, "k", func(ctx context.Context, _ Held) error {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(3 * time.Second):
				return nil
			}
		}, WithTTL(time.Second), WithAutoExtend(quiet))
		if err != nil {
			t.Fatalf("two failed extends with time to spare lost the lock: %v", err)
		}
		if _, ext, _ := m.Counts(); ext < 7 {
			t.Errorf("%d extends in 3s", ext)
		}
	})
}
