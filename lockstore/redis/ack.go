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
		pipe := s.client.Pipeline()
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
	info, err := s.client.Info(ctx, "replication").Result()
	if err != nil {
		return lockstore.Replication{}, classify(ctx, "replication", err)
	}
	var replicas int
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			replicas, _ = strconv.Atoi(v)
		}
	}
	detail := fmt.Sprintf("connected replicas=%d", replicas)
	switch {
	case s.ackReplicas > 0 && int64(replicas) <= s.ackReplicas:
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
