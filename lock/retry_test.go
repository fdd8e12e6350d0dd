package lock

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// almostOne is the largest float64 below 1, the top of rand's range.
var almostOne = math.Nextafter(1, 0)

func constRand(v float64) func() float64 { return func() float64 { return v } }

func TestRetryDelayFormulas(t *testing.T) {
	const d = 100 * time.Millisecond
	tests := []struct {
		name    string
		backoff Backoff
		jitter  Jitter
		attempt int
		r       float64
		want    time.Duration
	}{
		// Exponential: base = 100ms * 2^(attempt-1).
		{"exp none a1", BackoffExponential, JitterNone, 1, 0.7, 100 * time.Millisecond},
		{"exp none a3", BackoffExponential, JitterNone, 3, 0.7, 400 * time.Millisecond},
		{"exp equal a3 r0", BackoffExponential, JitterEqual, 3, 0, 200 * time.Millisecond},    // base/2
		{"exp equal a3 r.5", BackoffExponential, JitterEqual, 3, 0.5, 300 * time.Millisecond}, // base/2 + base/4
		{"exp equal a3 r→1", BackoffExponential, JitterEqual, 3, almostOne, 400 * time.Millisecond},
		{"exp full a3 r0", BackoffExponential, JitterFull, 3, 0, 0},
		{"exp full a3 r.5", BackoffExponential, JitterFull, 3, 0.5, 200 * time.Millisecond},
		{"exp full a3 r→1", BackoffExponential, JitterFull, 3, almostOne, 400 * time.Millisecond},
		{"exp none a10", BackoffExponential, JitterNone, 10, 0, 51200 * time.Millisecond},
		// Fixed: base = 100ms whatever the attempt.
		{"fixed none a7", BackoffFixed, JitterNone, 7, 0.3, 100 * time.Millisecond},
		{"fixed equal a7 r0", BackoffFixed, JitterEqual, 7, 0, 50 * time.Millisecond},
		{"fixed equal a7 r→1", BackoffFixed, JitterEqual, 7, almostOne, 100 * time.Millisecond},
		{"fixed full a7 r.25", BackoffFixed, JitterFull, 7, 0.25, 25 * time.Millisecond},
		// Zero strategy fields are the defaults: exponential, equal.
		{"defaults a2 r0", "", "", 2, 0, 100 * time.Millisecond},
		// A broken random source is clamped into [0, 1].
		{"rand -1", BackoffFixed, JitterFull, 1, -1, 0},
		{"rand 2", BackoffFixed, JitterFull, 1, 2, 100 * time.Millisecond},
		{"rand NaN", BackoffFixed, JitterFull, 1, math.NaN(), 0},
	}
	for _, tt := range tests {
		p := RetryPolicy{RetryDelay: d, Backoff: tt.backoff, Jitter: tt.jitter, Rand: constRand(tt.r)}
		got := p.Delay(tt.attempt)
		// r→1 gives base*(1-2^-53): equal to base within a nanosecond.
		if diff := got - tt.want; diff < -time.Nanosecond || diff > 0 {
			t.Errorf("%s: Delay = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRetryDelaySaturates(t *testing.T) {
	p := RetryPolicy{Jitter: JitterNone}
	for _, a := range []int{62, 63, 64, 200, 5000} {
		if d := p.Delay(a); d <= 0 {
			t.Errorf("Delay(%d) = %v: overflowed", a, d)
		}
	}
}

func TestRetryPolicyDefaults(t *testing.T) {
	p := RetryPolicy{}.WithDefaults()
	if p.MaxRetries != 10 || p.RetryDelay != 100*time.Millisecond || p.Timeout != 5*time.Second ||
		p.Backoff != BackoffExponential || p.Jitter != JitterEqual || p.Rand == nil {
		t.Errorf("zero policy defaults = %+v", p)
	}
	if q := (RetryPolicy{MaxRetries: NoRetries}).WithDefaults().WithDefaults(); q.MaxRetries != NoRetries || q.retries() != 0 {
		t.Errorf("NoRetries did not survive WithDefaults twice: %d", q.MaxRetries)
	}
}

func TestRetryPolicyValidate(t *testing.T) {
	bad := []RetryPolicy{
		{RetryDelay: -1},
		{Timeout: -time.Second},
		{Backoff: "linear"},
		{Jitter: "decorrelated"},
	}
	for _, p := range bad {
		if err := p.Validate(); lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("Validate(%+v) = %v, want InvalidArgument", p, err)
		}
		_, err := AcquireWithRetry(context.Background(), newMemStore(), "k", time.Second, p)
		if lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("AcquireWithRetry with %+v = %v, want InvalidArgument", p, err)
		}
	}
	if err := (RetryPolicy{}).Validate(); err != nil {
		t.Errorf("zero policy invalid: %v", err)
	}
}

// offsets returns each time relative to the first, in milliseconds.
func offsets(ts []time.Time) []int64 {
	out := make([]int64, len(ts))
	for i, x := range ts {
		out[i] = x.Sub(ts[0]).Milliseconds()
	}
	return out
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// alwaysHeld makes m's key permanently contended.
func alwaysHeld(m *memStore) {
	m.OnAcquire = func(context.Context, string) (lockstore.AcquireResult, error, bool) {
		return lockstore.AcquireResult{Reason: lockstore.ReasonLocked}, nil, true
	}
}

func TestAcquireWithRetryAttempts(t *testing.T) {
	tests := []struct {
		name   string
		policy RetryPolicy
		want   []int64 // attempt times, ms from the first
	}{
		{"maxRetries+1 attempts, exponential, no jitter",
			RetryPolicy{MaxRetries: 3, RetryDelay: 10 * time.Millisecond, Jitter: JitterNone, Timeout: time.Hour},
			[]int64{0, 10, 30, 70}},
		{"fixed, full jitter r=.5",
			RetryPolicy{MaxRetries: 2, RetryDelay: 10 * time.Millisecond, Backoff: BackoffFixed, Jitter: JitterFull, Rand: constRand(0.5), Timeout: time.Hour},
			[]int64{0, 5, 10}},
		{"no retries", RetryPolicy{MaxRetries: NoRetries}, []int64{0}},
		// The zero policy with r=0: delays 50,100,200,400,800,1600 ms, then
		// 3200 is clamped to the 1850 ms left of the 5 s timeout, a last
		// attempt runs at 5000, and the next delay clamps to 0: timeout.
		// 8 attempts, not 11: time ran out first.
		{"defaults, clamped by the timeout",
			RetryPolicy{Rand: constRand(0)},
			[]int64{0, 50, 150, 350, 750, 1550, 3150, 5000}},
		{"timeout shorter than the first delay",
			RetryPolicy{RetryDelay: time.Second, Jitter: JitterNone, Timeout: 300 * time.Millisecond},
			[]int64{0, 300}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMemStore()
				alwaysHeld(m)
				start := time.Now()
				r, err := AcquireWithRetry(context.Background(), m, "k", time.Second, tt.policy)
				if lockstore.CodeOf(err) != lockstore.AcquisitionTimeout {
					t.Fatalf("err = %v, want AcquisitionTimeout", err)
				}
				if r.OK || r.Reason != lockstore.ReasonLocked {
					t.Errorf("result = %+v, want the last contention result", r)
				}
				if got := offsets(m.Acquires()); !equalInts(got, tt.want) {
					t.Errorf("attempts at %v ms, want %v", got, tt.want)
				}
				p := tt.policy.WithDefaults()
				if el := time.Since(start); el > p.Timeout {
					t.Errorf("loop ran %v, past its %v timeout", el, p.Timeout)
				}
			})
		})
	}
}

func TestAcquireWithRetrySucceedsAfterContention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemStore()
		// Someone else holds the key for 250 ms (plus the 1 s liveness
		// tolerance an expired lock keeps).
		other, err := m.Acquire(context.Background(), "k", 250*time.Millisecond)
		if err != nil || !other.OK {
			t.Fatal(other, err)
		}
		p := RetryPolicy{RetryDelay: 100 * time.Millisecond, Jitter: JitterNone}
		start := time.Now()
		r, err := AcquireWithRetry(context.Background(), m, "k", time.Second, p)
		if err != nil || !r.OK || r.Fence != "000000000000002" {
			t.Fatalf("AcquireWithRetry = %+v, %v", r, err)
		}
		// Attempts at 0, 100, 300, 700, 1500: the first after 1250 wins.
		if el := time.Since(start); el != 1500*time.Millisecond {
			t.Errorf("acquired after %v, want 1.5s", el)
		}
	})
}

func TestAcquireWithRetryContext(t *testing.T) {
	t.Run("cancel during sleep is Aborted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMemStore()
			alwaysHeld(m)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(120*time.Millisecond, cancel)
			start := time.Now()
			_, err := AcquireWithRetry(ctx, m, "k", time.Second, RetryPolicy{Jitter: JitterNone})
			if lockstore.CodeOf(err) != lockstore.Aborted {
				t.Fatalf("err = %v, want Aborted", err)
			}
			if el := time.Since(start); el != 120*time.Millisecond {
				t.Errorf("returned after %v, want promptly at the cancel (120ms)", el)
			}
		})
	})
	t.Run("deadline is NetworkTimeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMemStore()
			alwaysHeld(m)
			ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
			defer cancel()
			_, err := AcquireWithRetry(ctx, m, "k", time.Second, RetryPolicy{Jitter: JitterNone})
			if lockstore.CodeOf(err) != lockstore.NetworkTimeout {
				t.Fatalf("err = %v, want NetworkTimeout", err)
			}
		})
	})
	t.Run("already cancelled makes no attempt", func(t *testing.T) {
		m := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := AcquireWithRetry(ctx, m, "k", time.Second, RetryPolicy{})
		if lockstore.CodeOf(err) != lockstore.Aborted || len(m.Acquires()) != 0 {
			t.Fatalf("err = %v after %d attempts", err, len(m.Acquires()))
		}
	})
	t.Run("driver error after cancel is mapped by the context", func(t *testing.T) {
		m := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		m.OnAcquire = func(context.Context, string) (lockstore.AcquireResult, error, bool) {
			cancel()
			return lockstore.AcquireResult{}, errors.New("use of closed network connection"), true
		}
		_, err := AcquireWithRetry(ctx, m, "k", time.Second, RetryPolicy{})
		if lockstore.CodeOf(err) != lockstore.Aborted {
			t.Fatalf("err = %v, want Aborted", err)
		}
	})
}

func TestAcquireWithRetryErrorsAreNotRetried(t *testing.T) {
	for _, code := range []lockstore.Code{lockstore.ServiceUnavailable, lockstore.InvalidArgument, lockstore.AuthFailed, lockstore.Internal} {
		m := newMemStore()
		m.OnAcquire = func(context.Context, string) (lockstore.AcquireResult, error, bool) {
			return lockstore.AcquireResult{}, &lockstore.Error{Code: code, Op: "acquire"}, true
		}
		_, err := AcquireWithRetry(context.Background(), m, "k", time.Second, RetryPolicy{})
		if lockstore.CodeOf(err) != code || len(m.Acquires()) != 1 {
			t.Errorf("%s: err %v after %d attempts, want it returned after 1", code, err, len(m.Acquires()))
		}
	}
	// The backend's own validation reaches the caller unchanged.
	_, err := AcquireWithRetry(context.Background(), newMemStore(), "", time.Second, RetryPolicy{})
	if lockstore.CodeOf(err) != lockstore.InvalidArgument {
		t.Errorf("empty key: %v", err)
	}
}

// TestAcquireWithRetryTimeoutKeepsKeyUnprinted: the AcquisitionTimeout
// error carries the raw key for code (onReleaseError-style callers) and
// prints only its hash.
func TestAcquireWithRetryTimeoutKeepsKeyUnprinted(t *testing.T) {
	const key = "tenant-42/invoice:secret-key"
	m := newMemStore()
	alwaysHeld(m)
	_, err := AcquireWithRetry(context.Background(), m, key, time.Second, RetryPolicy{MaxRetries: NoRetries})
	var le *lockstore.Error
	if !errors.As(err, &le) || le.Code != lockstore.AcquisitionTimeout || le.Key != key {
		t.Fatalf("err = %#v, want AcquisitionTimeout with the key", err)
	}
	if msg := err.Error(); strings.Contains(msg, "secret-key") || !strings.Contains(msg, lockstore.HashKey(key)) {
		t.Errorf("error text %q: want the key's hash, never the key", msg)
	}
}
