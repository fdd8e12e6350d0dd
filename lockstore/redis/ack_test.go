package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

// TestAckReplicas: with ack=replicas an acquire answers only once the
// replicas have its writes. A replica that is attached acknowledges, and
// the acquire succeeds with the fence on the replica; when the replica is
// frozen (a partition, replication lag) the acquire fails closed with
// ServiceUnavailable, the lock it wrote is released, and the fence it
// consumed is never handed out. Without ack mode the same acquire would
// succeed with a fence the replica lacks (the broken variant).
func TestAckReplicas(t *testing.T) {
	primary := startServer(t)
	replica := startServer(t, "--replicaof", "127.0.0.1", fmt.Sprint(primary.port))
	base := "redis://" + primary.addr() + "/0?prefix=ack"
	acked := openURL(t, base+"&ack=replicas&ackReplicas=1&ackTimeout=200ms")
	plain := openURL(t, base)
	rc := openURL(t, "redis://"+replica.addr()+"/0?prefix=ack").Client()
	ctx := context.Background()
	fk := mustKey(t, acked.FenceKey, "k")

	// Wait for the replica to be attached (a full sync on a fresh pair).
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := acked.Client().Info(ctx, "replication").Result()
		if strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never came online:\n%s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}

	r := locktest.Acquire(t, acked, "k", time.Minute)
	if got, _ := rc.Get(ctx, fk).Result(); fence(t, got) != r.Fence {
		t.Fatalf("after an acknowledged acquire the replica's counter is %q, want the fence %s", got, r.Fence)
	}
	if res, err := acked.Release(ctx, r.LockID); err != nil || !res.OK {
		t.Fatalf("Release = %+v, %v", res, err)
	}

	thaw := freeze(replica)
	defer thaw()
	start := time.Now()
	r2, err := acked.Acquire(ctx, "k", time.Minute)
	if lockstore.CodeOf(err) != lockstore.ServiceUnavailable || r2.OK || r2.LockID != "" {
		t.Fatalf("Acquire with the replica frozen = %+v, %v; want ServiceUnavailable and no lock", r2, err)
	}
	if !strings.Contains(err.Error(), "0 of 1") {
		t.Errorf("error %q does not say how many replicas acknowledged", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the refused acquire took %s; ackTimeout is 200ms", took)
	}
	if held, err := acked.IsLocked(ctx, "k"); err != nil || held {
		t.Errorf("IsLocked after the refused acquire = %v, %v; want the lock released", held, err)
	}
	burned, _ := acked.Client().Get(ctx, fk).Int64()

	// The broken variant: without ack mode the same acquire succeeds on the
	// primary while the replica is frozen, so a failover now would promote
	// a server that never saw this fence.
	r3 := locktest.Acquire(t, plain, "k", time.Minute)
	if n, _ := lockstore.ParseFence(r3.Fence); n <= burned {
		t.Errorf("fence after the refused acquire = %d, not above the burned counter %d", n, burned)
	}
	plain.Release(ctx, r3.LockID)
}

func fence(t *testing.T, counter string) string {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(counter, &n); err != nil || n < 1 {
		return ""
	}
	f, err := lockstore.FormatFence(n)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestAckParams: the acknowledgement parameters are checked where they
// enter.
func TestAckParams(t *testing.T) {
	for _, c := range []struct{ query, errHas string }{
		{"ack=replicas&ackReplicas=2", ""},
		{"ack=replicas&ackReplicas=2&ackTimeout=1s", ""},
		{"ack=replicas", "ackReplicas=N"},
		{"ack=replicas&ackReplicas=0", "ackReplicas=N"},
		{"ack=all&ackReplicas=1", "the only acknowledgement mode"},
		{"ackReplicas=1", "need ack=replicas"},
		{"ack=replicas&ackReplicas=1&ackTimeout=5s", "ackTimeout must be a duration in [1ms, 1s]"},
		{"ack=replicas&ackReplicas=1&ackTimeout=500us", "ackTimeout must be a duration in [1ms, 1s]"}, // WAIT N 0 blocks for good
	} {
		cfg, err := ParseURL("redis://127.0.0.1:6379/0?" + c.query)
		if c.errHas == "" {
			if err != nil || cfg.AckReplicas != 2 {
				t.Errorf("ParseURL(?%s) = %+v, %v", c.query, cfg.AckReplicas, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.errHas) {
			t.Errorf("ParseURL(?%s) error = %v, want one containing %q", c.query, err, c.errHas)
		}
	}
}

// TestAckTimeoutWithinReadTimeout: the WAIT must end before the
// connection's read deadline, or a slow replica would read as an outage;
// Open refuses the pair before it connects.
func TestAckTimeoutWithinReadTimeout(t *testing.T) {
	cfg, err := ParseURL("redis://127.0.0.1:1/0?ack=replicas&ackReplicas=1&ackTimeout=250ms&read_timeout=100ms")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "below the read timeout") {
		t.Fatalf("Open = %v; want the ackTimeout refused against the read timeout", err)
	}
}
