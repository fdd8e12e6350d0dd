package authz

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// TestExtProcMaxWait: fence_max_wait is the barrier's wait on ext_proc. W1
// is in flight; W2 under a newer fence on a route with fence_max_wait 2s
// waits (the check's own timeout, the default, is 50 ms here) and is
// admitted when W1's response headers arrive. The same route without the
// option is refused draining at once (its default: check.timeout), so the
// option is what made W2 wait. Values that do not parse, fence_max_wait
// without the barrier, and one above check.maxWaitCap fail closed.
func TestExtProcMaxWait(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	c := serveExtProc(t, fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond, MaxWaitCap: 10 * time.Second}))
	wait := map[string]string{fencewire.ExtKey: "acct", fencewire.ExtBarrier: "on", fencewire.ExtMaxWrite: "1m", fencewire.ExtMaxWait: "2s"}
	l1 := locktest.Acquire(t, s, "acct", time.Minute)
	w1 := openStream(t, c, barrierOpts)
	mustAllow(t, w1.roundTrip(write(l1.Fence)))
	locktest.Release(t, s, l1.LockID)
	l2 := locktest.Acquire(t, s, "acct", time.Minute)

	mustDrain(t, openStream(t, c, barrierOpts).roundTrip(write(l2.Fence)))

	w2 := openStream(t, c, wait)
	if err := w2.s.Send(write(l2.Fence)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // six times the default wait
	finished := time.Now()
	w1.roundTrip(envoyResponseHeaders(200))
	resp, err := w2.s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	mustAllow(t, resp)
	if took := time.Since(finished); took > time.Second {
		t.Errorf("W2 admitted %v after W1 finished", took)
	}
	w2.roundTrip(envoyResponseHeaders(200))

	for _, bad := range []map[string]string{
		{fencewire.ExtKey: "acct", fencewire.ExtBarrier: "on", fencewire.ExtMaxWait: "soon"},
		{fencewire.ExtKey: "acct", fencewire.ExtBarrier: "on", fencewire.ExtMaxWait: "0s"},
		{fencewire.ExtKey: "acct", fencewire.ExtMaxWait: "2s"},
		{fencewire.ExtKey: "acct", fencewire.ExtBarrier: "on", fencewire.ExtMaxWait: "1m"}, // above check.maxWaitCap (10 s)
	} {
		code, hs, _ := immediateOf(t, openStream(t, c, bad).roundTrip(write(l2.Fence)))
		if code != 503 || hs[fencewire.HeaderReason] != "unavailable" {
			t.Errorf("%v: %d %v, want 503 unavailable", bad, code, hs)
		}
	}
}
