package redis

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
)

// crossCheck runs workers goroutines that each acquire, inspect, look up
// and release their own keys, and counts the replies that are not their
// caller's (a lock, fence or key that belongs to another call), plus the
// calls that failed outright.
func crossCheck(t *testing.T, s *Store, tag string, workers, rounds int) (wrong, failed int) {
	t.Helper()
	var mu sync.Mutex
	count := func(w, f int) { mu.Lock(); wrong += w; failed += f; mu.Unlock() }
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			ctx := context.Background()
			for i := range rounds {
				key := fmt.Sprintf("%s/%d/%d", tag, g, i)
				a, err := s.Acquire(ctx, key, time.Minute)
				if err != nil || !a.OK {
					count(0, 1)
					continue
				}
				st, err := s.Inspect(ctx, key)
				switch {
				case err != nil:
					count(0, 1)
				case st.Live == nil || st.Live.LockID != a.LockID || st.LatestFence != a.Fence:
					count(1, 0)
				}
				info, err := s.LookupLockID(ctx, a.LockID)
				switch {
				case err != nil:
					count(0, 1)
				case info == nil || info.KeyHash != lockstore.HashKey(key) || info.Fence != a.Fence:
					count(1, 0)
				}
				r, err := s.Release(ctx, a.LockID)
				if err != nil || !r.OK {
					count(0, 1)
				}
			}
		})
	}
	wg.Wait()
	return wrong, failed
}

// TestDispatchRepliesReachTheirCallers: under concurrency, scripts go out
// in shared pipelines and every caller still gets its own reply. The same
// workload against a dispatcher that hands replies to the wrong callers
// must show it.
func TestDispatchRepliesReachTheirCallers(t *testing.T) {
	prefix := "dispatch-" + fmt.Sprint(time.Now().UnixNano())
	s := openPrefix(t, prefix)
	t.Cleanup(func() { dropPrefix(t, s.single, prefix) })

	wrong, failed := crossCheck(t, s, "sound", 32, 30)
	if wrong != 0 || failed != 0 {
		t.Errorf("%d replies reached the wrong caller, %d calls failed", wrong, failed)
	}
	if s.d.pipelined.Load() == 0 {
		t.Fatal("no script was sent in a pipeline: the test did not exercise batching")
	}

	// Broken variant: each reply goes to the next caller in the batch.
	broken := openPrefix(t, prefix)
	broken.d.deliver = func(batch []*call) {
		first := batch[0].cmd
		for i := range len(batch) - 1 {
			batch[i].cmd = batch[i+1].cmd
		}
		batch[len(batch)-1].cmd = first
	}
	if wrong, failed := crossCheck(t, broken, "broken", 32, 30); wrong+failed == 0 {
		t.Error("a dispatcher that swaps replies went unnoticed")
	}
}

// TestDispatchAbandonedCallIsNotSent: a lock call whose caller gave up
// while it waited behind a batch in flight returns at its own deadline and
// never takes effect later.
func TestDispatchAbandonedCallIsNotSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		// sendAbandoned breaks the dispatcher: it sends calls whose
		// caller has already returned.
		sendAbandoned bool
	}{{"sound", false}, {"broken", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t)
			s := openURL(t, "redis://"+srv.addr()+"/0?prefix=abandon&read_timeout=10s&write_timeout=10s")
			if tc.sendAbandoned {
				s.d.sendAbandoned = true
			}
			thaw := freeze(srv)
			defer thaw()

			// One call per lane goes out and hangs on the frozen server
			// (each waits until the one before has been taken, so no lane
			// is left idle).
			inFlight := make(chan error, lanes)
			for i := range lanes {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					_, err := s.IsLocked(ctx, fmt.Sprint("other-", i))
					inFlight <- err
				}()
				waitTaken(t, s.d, int64(i+1))
			}
			time.Sleep(50 * time.Millisecond) // every lane is now in its round trip

			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			start := time.Now()
			_, err := s.Acquire(ctx, "k", time.Minute)
			elapsed := time.Since(start)
			cancel()
			if code := lockstore.CodeOf(err); code != lockstore.NetworkTimeout {
				t.Errorf("acquire queued behind a frozen round trip: %v (code %q), want NetworkTimeout", err, code)
			}
			if elapsed > 5*time.Second {
				t.Errorf("acquire took %v past its 200ms deadline", elapsed)
			}

			// A live call queued behind the abandoned one shares its batch,
			// so the batch goes out under a deadline that has not passed.
			second := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err := s.IsLocked(ctx, "another")
				second <- err
			}()
			waitQueued(t, s.d, 2)

			thaw()
			for range lanes {
				if err := <-inFlight; err != nil {
					t.Fatalf("a call in flight during the freeze: %v", err)
				}
			}
			if err := <-second; err != nil {
				t.Fatalf("the call queued after the abandoned one: %v", err)
			}
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := s.Inspect(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			taken := st.Live != nil || st.LatestFence != ""
			if taken != tc.sendAbandoned {
				t.Errorf("abandoned acquire took effect: %v (want %v); state %+v", taken, tc.sendAbandoned, st)
			}
		})
	}
}

// freeze stops srv (SIGSTOP) and returns the func that resumes it; a
// second call of that func does nothing.
func freeze(srv *redisServer) (thaw func()) {
	srv.signal(syscall.SIGSTOP)
	var once sync.Once
	return func() { once.Do(func() { srv.signal(syscall.SIGCONT) }) }
}

// waitTaken waits until the dispatcher's lanes have taken n calls.
func waitTaken(t *testing.T, d *dispatcher, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for d.taken.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("lanes took %d calls, want %d", d.taken.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitQueued waits until the dispatcher's queue holds want calls.
func waitQueued(t *testing.T, d *dispatcher, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d.mu.Lock()
		n := len(d.queue)
		d.mu.Unlock()
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dispatcher queue holds %d calls, want %d", n, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDispatchClose: calls after Close fail as a closed client does (Close
// itself waits for the dispatcher's lanes to stop).
func TestDispatchClose(t *testing.T) {
	s := openPrefix(t, "dispatch-close")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				_, _ = s.IsLocked(context.Background(), "k")
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.IsLocked(context.Background(), "k")
	if err == nil {
		t.Fatal("IsLocked after Close succeeded")
	}
	if code := lockstore.CodeOf(err); code != lockstore.ServiceUnavailable {
		t.Errorf("IsLocked after Close: %v (code %q)", err, code)
	}
}

// TestDispatchHungConnection: a connection that stops answering (as a
// half-open TCP session does) holds up only the calls in its round trip:
// once it has been out for stallAfter, the calls queued behind it go out on
// another lane and connection. A dispatcher that never adds a lane must
// fail this.
func TestDispatchHungConnection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxBusy int
		wantOK  bool
	}{{"sound", lanes, true}, {"broken-one-lane", 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := url.Parse(testURL(t))
			if err != nil {
				t.Fatal(err)
			}
			proxy := newFreezingProxy(t, u.Host, "hang-here")
			prefix := "hung-" + fmt.Sprint(time.Now().UnixNano())
			s := openURL(t, "redis://"+proxy+u.Path+"?prefix="+prefix+"&read_timeout=20s&write_timeout=20s")
			s.d.maxBusy = tc.maxBusy

			hung := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				_, err := s.IsLocked(ctx, "hang-here")
				hung <- err
			}()
			waitTaken(t, s.d, 1)

			// Its deadline ends before the hung call's.
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			_, err = s.IsLocked(ctx, "elsewhere")
			if ok := err == nil; ok != tc.wantOK {
				t.Errorf("a call queued behind a hung connection: err=%v, want success %v", err, tc.wantOK)
			}
			if err := <-hung; lockstore.CodeOf(err) != lockstore.NetworkTimeout {
				t.Errorf("the call on the hung connection: %v, want NetworkTimeout", err)
			}
		})
	}
}

// newFreezingProxy forwards TCP connections to target and stops
// forwarding, in both directions, on a connection whose client sends
// marker; other connections are unaffected. It returns its address.
func newFreezingProxy(t *testing.T, target, marker string) string {
	t.Helper()
	l := testutil.Listen(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			var frozen atomic.Bool
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if bytes.Contains(buf[:n], []byte(marker)) {
						frozen.Store(true)
					}
					if frozen.Load() {
						continue
					}
					if _, err := u.Write(buf[:n]); err != nil {
						return
					}
				}
			})
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := u.Read(buf)
					if err != nil {
						return
					}
					if frozen.Load() {
						continue
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			})
		}
	})
	return l.Addr().String()
}

// TestDispatchAbandonedCallIsNotResent: a script that met NOSCRIPT (the
// server lost its script cache) is sent again as EVAL only for a caller
// still waiting; an acquire whose caller gave up during the first round
// trip never takes effect.
func TestDispatchAbandonedCallIsNotResent(t *testing.T) {
	for _, tc := range []struct {
		name          string
		sendAbandoned bool
	}{{"sound", false}, {"broken", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t)
			s := openURL(t, "redis://"+srv.addr()+"/0?prefix=resend&read_timeout=10s&write_timeout=10s")
			s.d.sendAbandoned = tc.sendAbandoned
			if err := s.Client().ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			thaw := freeze(srv)
			defer thaw()

			long := func(key string, done chan<- error) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err := s.IsLocked(ctx, key)
				done <- err
			}
			// A first round trip hangs on the frozen server; the next two
			// calls queue behind it and leave together when a second lane
			// joins (after stallAfter), then hang too.
			first, other := make(chan error, 1), make(chan error, 1)
			go long("first", first)
			waitTaken(t, s.d, 1)
			go long("other", other)
			acquired := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
				defer cancel()
				_, err := s.Acquire(ctx, "k", time.Minute)
				acquired <- err
			}()
			waitTaken(t, s.d, 3)
			if err := <-acquired; lockstore.CodeOf(err) != lockstore.NetworkTimeout {
				t.Fatalf("acquire during the freeze: %v, want NetworkTimeout", err)
			}

			// Thawed, both batches come back NOSCRIPT; only callers still
			// waiting have their scripts sent again.
			thaw()
			for _, ch := range []chan error{first, other} {
				if err := <-ch; err != nil {
					t.Fatalf("a waiting call after NOSCRIPT: %v", err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := s.Inspect(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if taken := st.Live != nil || st.LatestFence != ""; taken != tc.sendAbandoned {
				t.Errorf("abandoned acquire took effect after NOSCRIPT: %v (want %v); state %+v", taken, tc.sendAbandoned, st)
			}
		})
	}
}
