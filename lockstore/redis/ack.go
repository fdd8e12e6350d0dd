package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lockstore"
)

// The acknowledgement mode (Config.AckReplicas > 0, store URL
// ack=replicas&ackReplicas=N) makes an acquire wait, before it answers,
// until N replicas have the fence: the acquire script and a WAIT N go out
// together as one pipeline on one connection (WAIT covers that
// connection's writes), so it stays one round trip. With fewer than N
// acknowledgements inside AckTimeout the acquire fails closed: the caller
// gets ServiceUnavailable and no lockId, the lock just written is released
// (best effort: if that fails too, it expires with its TTL), and the fence
// it consumed is never handed out. A promoted replica then has every fence
// an answered acquire ever returned, with no assumption about clocks.
//
// N must be every replica a failover may promote: WAIT counts replicas
// connected now, so N smaller than the number of replicas lets a lagging
// one be promoted, and "all connected replicas" would pass trivially when
// the replicas are cut off.

// MaxAckTimeout keeps the WAIT inside the connection's read timeout
// (DefaultReadTimeout), which would otherwise cut it off as an outage.
const MaxAckTimeout = time.Second

// DefaultAckTimeout bounds an acknowledged acquire's WAIT when the store URL
// sets no ackTimeout: long enough for replicas on a LAN, short next to the
// lock API's 5 s operation bound.
const DefaultAckTimeout = 250 * time.Millisecond

// ackFailed is the error of an acquire whose fence too few replicas
// acknowledged.
func ackFailed(key string, got, want int64, timeout time.Duration) *lockstore.Error {
	return &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: "acquire", Key: key,
		Msg: fmt.Sprintf("replicas did not acknowledge the acquire: %d of %d within %s (ack=replicas); the fence was not handed out and the lock was released", got, want, timeout)}
}

// acquireAcked runs the acquire script followed by WAIT on one connection
// and returns the script's reply, or ackFailed's error after releasing the
// lock the script wrote.
func (s *Store) acquireAcked(ctx context.Context, key, lockID string, keys []string, args ...any) (any, error) {
	const op = "acquire"
	timeout := s.ackTimeout
	run := func(eval bool) (*goredis.Cmd, *goredis.Cmd, error) {
		conn := s.single
		if s.cluster != nil {
			// WAIT counts the replicas of the node it runs on, for the
			// writes of its connection: it must go with the script to
			// the master of the key's slot, whose replicas a failover
			// of this shard promotes.
			var err error
			if conn, err = s.cluster.MasterForKey(ctx, keys[0]); err != nil {
				return failedCmd(ctx, err), failedCmd(ctx, err), err
			}
		}
		var pipe goredis.Pipeliner
		if s.cluster != nil && s.waitAnywhere {
			pipe = s.cluster.Pipeline() // broken variant: WAIT goes to any master
		} else {
			pipe = conn.Pipeline()
		}
		var cmd *goredis.Cmd
		if eval {
			cmd = acquireScript.Eval(ctx, pipe, keys, args...)
		} else {
			cmd = acquireScript.EvalSha(ctx, pipe, keys, args...)
		}
		wait := pipe.Do(ctx, "wait", s.ackReplicas, timeout.Milliseconds())
		_, err := pipe.Exec(ctx)
		return cmd, wait, err
	}
	cmd, wait, _ := run(false)
	if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd, wait, _ = run(true)
	}
	// On a cluster, a slot that moved (MOVED, ASK: this pipeline goes to
	// one node and follows no redirect) or a failover in progress: the
	// script did not run; ask again where the slot map now says, a
	// bounded number of times (as the dispatcher's retryCluster does).
	for i, backoff := 0, clusterBackoff; s.cluster != nil && i < clusterRetries && notExecuted(cmd.Err()) && ctx.Err() == nil; i, backoff = i+1, min(2*backoff, clusterBackoffMax) {
		s.cluster.ReloadState(ctx)
		sleepCtx(ctx, backoff)
		cmd, wait, _ = run(false)
		if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			cmd, wait, _ = run(true)
		}
	}
	reply, err := cmd.Result()
	if err != nil {
		return nil, classify(ctx, op, err)
	}
	if _, ok := reply.(string); !ok {
		return reply, nil // nothing was written: locked, or refused
	}
	acked, err := wait.Int64()
	if err == nil && acked >= s.ackReplicas {
		return reply, nil
	}
	// Written on the primary, not known to be on the replicas: take the
	// lock back, under a context of its own (the caller's may be spent).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if _, rerr := s.Release(rctx, lockID); rerr != nil {
		s.log.WarnContext(ctx, "redis: could not release an unacknowledged acquire; it expires with its TTL",
			"keyHash", lockstore.HashKey(key), "err", rerr)
	}
	if err != nil {
		return nil, &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: op, Key: key,
			Msg: "replicas did not acknowledge the acquire (WAIT failed); the fence was not handed out", Err: classify(ctx, op, err)}
	}
	s.log.WarnContext(ctx, "redis: replicas did not acknowledge an acquire in time; refused it",
		"keyHash", lockstore.HashKey(key), "acked", acked, "want", s.ackReplicas, "timeout", timeout)
	return nil, ackFailed(key, acked, s.ackReplicas, timeout)
}

var _ lockstore.ReplicationReporter = (*Store)(nil)

// Replication reports synchronous under ack=replicas when acquires wait
// for every connected replica; asynchronous when some replica is not waited
// for (ackReplicas below the replicas connected: a lagging one may be
// promoted) or without ack mode; none without replicas.
func (s *Store) Replication(ctx context.Context) (lockstore.Replication, error) {
	// On a cluster every shard's master is asked, and the shard with the
	// fewest replicas is the report: a failover anywhere loses what that
	// shard's replicas lacked.
	replicas, most, shards := -1, 0, 0
	err := s.eachMaster(ctx, func(c *goredis.Client) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		n := 0
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		if replicas < 0 || n < replicas {
			replicas = n
		}
		most = max(most, n)
		shards++
		return nil
	})
	if err != nil {
		return lockstore.Replication{}, classify(ctx, "replication", err)
	}
	replicas = max(replicas, 0)
	detail := fmt.Sprintf("connected replicas=%d", replicas)
	if s.cluster != nil {
		detail = fmt.Sprintf("cluster shards=%d; connected replicas of the least replicated shard=%d", shards, replicas)
	}
	switch {
	case s.ackReplicas > 0 && int64(most) <= s.ackReplicas:
		return lockstore.Replication{Mode: lockstore.ReplicationSynchronous,
			Detail: fmt.Sprintf("%s; acquires wait for %d (ack=replicas)", detail, s.ackReplicas)}, nil
	case s.ackReplicas > 0:
		return lockstore.Replication{Mode: lockstore.ReplicationAsynchronous,
			Detail: fmt.Sprintf("%s; acquires wait for only %d (ack=replicas): raise ackReplicas to every replica a failover may promote", detail, s.ackReplicas)}, nil
	case replicas > 0:
		return lockstore.Replication{Mode: lockstore.ReplicationAsynchronous, Detail: detail}, nil
	}
	return lockstore.Replication{Mode: lockstore.ReplicationNone, Detail: detail}, nil
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
