package fencecheck

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// TestBarrierWaiterShares is issue #26 item 6's attack scene on a real
// store: a client holding locks on its own keys (an old-fence write kept in
// flight, a re-acquire) parks 300 current-fence writes at the barrier, on
// one key or spread over ten; then a handover write on another key, from
// another client, whose older write finishes 0.9 s later, must wait and be
// admitted. With one shared pool (the broken variant) the attacker takes
// every slot and that write is refused draining at once: caught.
func TestBarrierWaiterShares(t *testing.T) {
	const (
		attackers = 300
		hold      = 900 * time.Millisecond // the victim's older write
	)
	scenes := []struct {
		name string
		keys int // the attacker's keys, its writes spread over them
	}{
		{"one key", 1},
		{"one client, ten keys", 10},
	}
	for _, ws := range waitStores() {
		for _, sc := range scenes {
			for _, broken := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/broken=%v", ws.name, sc.name, broken)
				t.Run(name, func(t *testing.T) {
					s, _ := ws.open(t)
					c := New(s, Options{Timeout: 500 * time.Millisecond})
					if broken {
						c.slots = newWaiterSlots(int(c.maxWaiters), true)
					}
					actx, stop := context.WithCancel(t.Context())
					var (
						wg                sync.WaitGroup
						answered, refused atomic.Int64
					)
					defer func() { stop(); wg.Wait() }()
					for k := range sc.keys {
						key := fmt.Sprintf("attacker/%d", k)
						l1 := locktest.Acquire(t, s, key, time.Minute)
						old := admitted(t, c, key, l1.Fence) // kept in flight
						defer func() { _ = c.Finish(context.Background(), old) }()
						l2 := locktest.HandOver(t, s, l1, key, time.Minute)
						for i := range attackers / sc.keys {
							wg.Add(1)
							go func() {
								defer wg.Done()
								d, _ := c.Check(actx, Request{Key: key, Write: true, Fence: l2.Fence, Barrier: true,
									MaxWrite: time.Minute, MaxWait: 20 * time.Second, Peer: fmt.Sprintf("10.0.0.1:%d", 1000+i)})
								answered.Add(1)
								if d.Reason == ReasonDraining {
									refused.Add(1)
								}
							}()
						}
					}
					// Every attacking write either waits or was refused.
					testutil.WaitFor(t, 20*time.Second, "the attacking writes to wait or be refused", func() bool {
						return c.waiters.Load()+refused.Load() == attackers
					})
					held := c.waiters.Load()
					if answered.Load() != refused.Load() {
						t.Fatalf("%d attacking writes answered other than draining", answered.Load()-refused.Load())
					}

					const key = "victim"
					l1 := locktest.Acquire(t, s, key, time.Minute)
					w1 := admitted(t, c, key, l1.Fence)
					l2 := locktest.HandOver(t, s, l1, key, time.Minute)
					start := time.Now()
					victim := make(chan checkResult, 1)
					go func() {
						d, err := c.Check(t.Context(), Request{Key: key, Write: true, Fence: l2.Fence, Barrier: true,
							MaxWrite: time.Minute, MaxWait: 5 * time.Second, Peer: "10.0.0.2:5555"})
						victim <- checkResult{d, err, time.Now()}
					}()
					time.Sleep(hold)
					_ = c.Finish(t.Context(), w1)
					r := <-victim
					if r.d.WriteID != "" {
						_ = c.Finish(t.Context(), r.d)
					}
					ok := r.d.Allowed && r.err == nil && r.at.Sub(start) >= hold
					t.Logf("attacker holds %d of %d waiter slots; the victim's write: allowed=%v reason=%q after %v",
						held, c.maxWaiters, r.d.Allowed, r.d.Reason, r.at.Sub(start).Round(time.Millisecond))
					switch {
					case !broken && !ok:
						t.Fatalf("the handover write on another key was not admitted after its wait: %+v %v", r.d, r.err)
					case !broken && held > c.maxWaiters/waiterShare:
						t.Fatalf("one client held %d waiter slots, over its share %d", held, c.maxWaiters/waiterShare)
					case !broken && promtest.ToFloat64(c.m.waitersShare.WithLabelValues(waitersFullKey))+
						promtest.ToFloat64(c.m.waitersShare.WithLabelValues(waitersFullClient)) == 0:
						t.Fatal("no refusal counted in fencegate_barrier_waiters_share_full_total")
					case broken && ok:
						t.Fatal("the one-pool variant let the victim's write wait: the test cannot tell it apart")
					case broken && (r.d.Reason != ReasonDraining || r.at.Sub(start) > hold/2):
						t.Fatalf("one pool: want the victim refused draining at once, got %+v after %v", r.d, r.at.Sub(start))
					}
				})
			}
		}
	}
}

// TestWaiterClient: the client a waiter counts under.
func TestWaiterClient(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.3:4567":          "10.1.2.3",
		"10.1.2.3":               "10.1.2.3",
		"[2001:db8:1:2::7]:443":  "2001:db8:1:2::",
		"[2001:db8:1:2:ff::]:80": "2001:db8:1:2::",
		"[::ffff:10.0.0.1]:80":   "10.0.0.1",
		"":                       "",
		"not an address":         "not-an-address",
		"also not one":           "not-an-address", // one bucket, not a client per spelling
	} {
		if got := waiterClient(in); got != want {
			t.Errorf("waiterClient(%q) = %q, want %q", in, got, want)
		}
	}
}
