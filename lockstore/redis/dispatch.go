package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// maxBatch bounds the scripts sent in one pipeline, so that a flood of
// callers becomes several round trips instead of one unbounded write.
const maxBatch = 128

// lanes is how many round trips the dispatcher keeps in flight at most.
// Normally one is out, and what queues behind it goes out in its next
// pipeline: the most batching, the least CPU per call. Another lane joins
// when the queue has grown to joinQueue calls (a batch that large already
// shares its system calls four ways, and waiting would leave the CPUs
// idle), or when every round trip in flight has been out for stallAfter.
// The second rule is for a connection that hangs (a half-open TCP
// session): with one lane alone it would hold up all callers until the
// longest deadline in its batch, and a pool of dead connections would be
// found out one deadline at a time. stallAfter is far beyond a healthy
// loopback or LAN round trip, yet a fraction of a check's 150 ms deadline.
//
// Measured (bench/, 16 workers; server+Redis CPU per ext_authz check, and
// the Redis store's cycles/s against redislock): four lanes always ready
// sent most calls alone, 86–107 µs per check; one lane joined only on a
// stall, 71–78 µs but 0.72× redislock (latency-bound, CPUs idle); joining
// at a queue of 4, 61 µs and 1.03×; at 8, 73 µs and 0.85×.
const (
	lanes      = 4
	joinQueue  = 4
	stallAfter = 20 * time.Millisecond
)

// dispatcher runs the lock scripts of concurrent callers together: a lane
// sends what has queued up, as one pipeline, whenever it is free.
//
// Why: on loopback, a round trip's cost is mostly its system calls — the
// client's write and read, Redis's read, write and event-loop wake-up —
// not the script. Under the concurrent load of a gateway (many checks and
// lock calls at once) one write of N scripts costs the client and Redis
// about what one script costs, so CPU per operation falls as load rises,
// on both sides. A lone caller does not wait for company: with no round
// trip in flight, its script is sent at once.
//
// What does not change: every operation is still one script, executed
// atomically by Redis with its own reads of TIME and the keys; scripts
// from one pipeline run one after another, in queue order, exactly as if
// their callers had sent them one by one on separate connections. Each
// caller gets its own reply and its own error.
//
// Deadlines: a caller waits at most until its own context ends and then
// returns that error, whatever its script's fate. A script whose caller's
// context ended before its batch was sent, or before its resend as EVAL
// after NOSCRIPT, is not sent (a lock call that gave up never takes effect
// later); one already sent may still run, as with any request whose reply
// is lost. A batch's round trip is bounded by
// the latest deadline among its callers.
type dispatcher struct {
	client goredis.UniversalClient
	// cluster is client on a cluster, else nil: scripts are then sent as
	// commands go-redis never replays (clusterCmd) and those that surely
	// did not run are sent again (retryCluster).
	cluster *goredis.ClusterClient

	mu      sync.Mutex
	work    *sync.Cond // a call was queued, a lane may join, or closed was set
	queue   []*call
	closed  bool
	started [lanes]time.Time // per lane: when its round trip left; zero when idle
	armed   bool             // a stall timer is pending
	lanes   sync.WaitGroup
	// maxBusy is how many lanes may be in flight at once: lanes, except
	// in a test that breaks the rule on purpose (1: no lane ever joins).
	maxBusy int

	// taken counts the calls lanes have taken from the queue; pipelined
	// those sent in pipelines of two or more. Tests read them.
	taken, pipelined atomic.Int64
	// retried counts the calls retryCluster sent again.
	retried atomic.Int64
	// noRetry (tests only) skips retryCluster: the broken variant
	// TestClusterMigrationRetry runs.
	noRetry bool
	// deliver, when set (tests only), sees a batch after its round trip and
	// before its callers are released, to break delivery on purpose.
	deliver func([]*call)
	// sendAbandoned, when set (tests only), sends scripts whose callers
	// have given up along with the rest of their batch: the broken variant
	// of the rule above.
	sendAbandoned bool
}

// call is one caller's script and, once ready is closed, its reply.
type call struct {
	ctx   context.Context
	s     script
	keys  []string
	args  []any
	cmd   *goredis.Cmd
	ready chan struct{}
}

func newDispatcher(client goredis.UniversalClient) *dispatcher {
	d := &dispatcher{client: client, maxBusy: lanes}
	d.work = sync.NewCond(&d.mu)
	for i := range lanes {
		d.lanes.Go(func() { d.lane(i) })
	}
	return d
}

// run queues s and waits for its reply or for ctx to end.
func (d *dispatcher) run(ctx context.Context, s script, keys []string, args ...any) *goredis.Cmd {
	if err := ctx.Err(); err != nil {
		return failedCmd(ctx, err)
	}
	c := &call{ctx: ctx, s: s, keys: keys, args: args, ready: make(chan struct{})}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return failedCmd(ctx, goredis.ErrClosed)
	}
	d.queue = append(d.queue, c)
	wake := d.mayStart(time.Now())
	d.mu.Unlock()
	if wake {
		d.work.Signal()
	}
	select {
	case <-c.ready:
		return c.cmd
	case <-ctx.Done():
		return failedCmd(ctx, ctx.Err())
	}
}

// mayStart reports whether an idle lane may send the queue now: no round
// trip is in flight, or the queue holds joinQueue calls, or every round
// trip in flight has been out for stallAfter. If not, it makes sure a
// timer will ask again when the youngest one passes stallAfter (and a lane
// whose round trip returns takes the queue at once: that adds no round
// trip in flight). d.mu is held.
func (d *dispatcher) mayStart(now time.Time) bool {
	var youngest time.Time
	busy := 0
	for _, t := range d.started {
		if !t.IsZero() {
			busy++
			if t.After(youngest) {
				youngest = t
			}
		}
	}
	wait := stallAfter - now.Sub(youngest)
	if busy == 0 || (busy < d.maxBusy && (wait <= 0 || len(d.queue) >= joinQueue)) {
		return true
	}
	if busy < d.maxBusy && !d.armed {
		d.armed = true
		time.AfterFunc(wait, func() {
			d.mu.Lock()
			d.armed = false
			wake := len(d.queue) > 0 && d.mayStart(time.Now())
			d.mu.Unlock()
			if wake {
				d.work.Signal()
			}
		})
	}
	return false
}

// close refuses new calls, lets the queued ones run, and returns when
// every lane has stopped. The caller closes the client afterwards.
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.work.Broadcast()
	d.lanes.Wait()
}

// lane i sends the queue, maxBatch at a time, whenever it may, until the
// dispatcher is closed and the queue is empty.
func (d *dispatcher) lane(i int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	returned := false // this lane's round trip just came back
	for {
		for len(d.queue) == 0 || !(returned || d.mayStart(time.Now())) {
			if d.closed && len(d.queue) == 0 {
				return
			}
			returned = false
			d.work.Wait()
		}
		returned = false
		n := min(len(d.queue), maxBatch)
		batch := d.queue[:n:n]
		if n == len(d.queue) {
			d.queue = nil
		} else {
			d.queue = d.queue[n:]
			d.work.Signal() // more than one batch queued: another lane may join
		}
		d.started[i] = time.Now()
		d.mu.Unlock()
		d.taken.Add(int64(n))
		d.exec(batch)
		d.mu.Lock()
		d.started[i] = time.Time{}
		returned = true
		if d.closed {
			d.work.Broadcast() // lanes waiting for a stall may now leave
		}
	}
}

// exec sends one batch and releases its callers.
func (d *dispatcher) exec(batch []*call) {
	live := make([]*call, 0, len(batch))
	var deadline time.Time
	bounded := true
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil && !d.sendAbandoned {
			// Its caller has returned already; the script is not sent.
			c.cmd = failedCmd(c.ctx, err)
			close(c.ready)
			continue
		}
		live = append(live, c)
		if dl, ok := c.ctx.Deadline(); !ok {
			bounded = false
		} else if dl.After(deadline) {
			deadline = dl
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	d.send(ctx, live, false)
	// NOSCRIPT: the server's script cache was flushed (a restart, a
	// failover to a replica that never loaded it, SCRIPT FLUSH), so these
	// scripts did not run and sending their source is safe — for callers
	// still waiting. One whose deadline passed during the first round trip
	// has returned; its script is not sent, as above.
	var again []*call
	for _, c := range live {
		if err := c.cmd.Err(); err == nil || !goredis.HasErrorPrefix(err, "NOSCRIPT") {
			continue
		}
		if err := c.ctx.Err(); err != nil && !d.sendAbandoned {
			c.cmd = failedCmd(c.ctx, err)
			continue
		}
		again = append(again, c)
	}
	if len(again) > 0 {
		d.send(ctx, again, true)
	}
	if d.cluster != nil && !d.noRetry {
		d.retryCluster(ctx, live)
	}
	if d.deliver != nil {
		d.deliver(live)
	}
	for _, c := range live {
		close(c.ready)
	}
}

// send runs calls' scripts by digest (EVALSHA), or by source (EVAL) when
// eval is set: one command alone, several as one pipeline.
func (d *dispatcher) send(ctx context.Context, calls []*call, eval bool) {
	run := func(c *call, sc goredis.Scripter) *goredis.Cmd {
		if eval {
			return c.s.Eval(ctx, sc, c.keys, c.args...)
		}
		return c.s.EvalSha(ctx, sc, c.keys, c.args...)
	}
	if d.cluster != nil {
		d.sendCluster(ctx, calls, eval)
		return
	}
	if len(calls) == 1 {
		calls[0].cmd = run(calls[0], d.client)
		return
	}
	pipe := d.client.Pipeline()
	for _, c := range calls {
		c.cmd = run(c, pipe)
	}
	// Exec's error is the first command's; each command keeps its own.
	_, _ = pipe.Exec(ctx)
	d.pipelined.Add(int64(len(calls)))
}

func failedCmd(ctx context.Context, err error) *goredis.Cmd {
	cmd := goredis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// noRetryCmd is a script call go-redis must not send twice: its cluster
// client replays a pipeline whose reply was lost (EOF, a reset) or whose
// first command failed with a retryable error, which would run scripts
// that already ran (a replayed acquire would find its own lock and report
// contention). The dispatcher retries itself, only what surely did not run.
type noRetryCmd struct{ *goredis.Cmd }

func (noRetryCmd) NoRetry() bool { return true }

// clusterCmd builds a script call (EVALSHA, or EVAL with eval) as
// go-redis's Script would, marked noRetryCmd.
func clusterCmd(ctx context.Context, c *call, eval bool) *goredis.Cmd {
	args := make([]any, 0, 3+len(c.keys)+len(c.args))
	if eval {
		args = append(args, "eval", c.s.src)
	} else {
		args = append(args, "evalsha", c.s.Hash())
	}
	args = append(args, len(c.keys))
	for _, k := range c.keys {
		args = append(args, k)
	}
	args = append(args, c.args...)
	cmd := goredis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// sendCluster is send on a cluster: the pipeline is split by node (each
// script goes to its key's master) and MOVED/ASK are followed by go-redis.
func (d *dispatcher) sendCluster(ctx context.Context, calls []*call, eval bool) {
	if len(calls) == 1 {
		calls[0].cmd = clusterCmd(ctx, calls[0], eval)
		_ = d.cluster.Process(ctx, noRetryCmd{calls[0].cmd})
		return
	}
	pipe := d.cluster.Pipeline()
	for _, c := range calls {
		c.cmd = clusterCmd(ctx, c, eval)
		_ = pipe.Process(ctx, noRetryCmd{c.cmd})
	}
	_, _ = pipe.Exec(ctx)
	d.pipelined.Add(int64(len(calls)))
}

// retryCluster sends again, up to clusterRetries times with a doubling
// backoff, the calls whose error says their script did not run
// (notExecuted: a failover or a slot migration in progress), and asks
// go-redis to reload the slot map before each round. A call whose caller
// has given up is not sent again; what still fails keeps its error.
func (d *dispatcher) retryCluster(ctx context.Context, live []*call) {
	backoff := clusterBackoff
	for range clusterRetries {
		var again []*call
		for _, c := range live {
			if err := c.cmd.Err(); !notExecuted(err) || c.ctx.Err() != nil {
				continue
			}
			again = append(again, c)
		}
		if len(again) == 0 {
			return
		}
		d.cluster.ReloadState(ctx)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, clusterBackoffMax)
		d.retried.Add(int64(len(again)))
		d.send(ctx, again, false)
		// A promoted replica may lack the scripts.
		var noscript []*call
		for _, c := range again {
			if err := c.cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
				noscript = append(noscript, c)
			}
		}
		if len(noscript) > 0 {
			d.send(ctx, noscript, true)
		}
	}
}
