package fencecheck

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/lockstore"
)

// Auditor defaults.
const (
	// DefaultAuditQueueSize bounds memory under a denial storm while the
	// sink is slow: beyond it events are dropped and counted.
	DefaultAuditQueueSize = 4096
	// DefaultAuditBatchSize amortises one backend write over many events.
	DefaultAuditBatchSize = 100
	// DefaultAuditFlushInterval bounds how long an event waits for its batch
	// to fill, so a lone denial is queryable within a second.
	DefaultAuditFlushInterval = time.Second
	// DefaultAuditWriteTimeout bounds one batch write, so a hung sink costs
	// at most one batch, not the whole queue.
	DefaultAuditWriteTimeout = 5 * time.Second
)

// AuditorOptions configure an Auditor. Zero values take the defaults.
type AuditorOptions struct {
	QueueSize     int           // events of each class buffered before Record drops (default 4096)
	BatchSize     int           // events per AppendAudit call (default 100)
	FlushInterval time.Duration // longest wait for a batch to fill (default 1 s)
	WriteTimeout  time.Duration // deadline of one AppendAudit call (default 5 s)
	Logger        *slog.Logger  // nil is slog.Default()
	Registerer    prometheus.Registerer
}

// Auditor moves audit events from the request path to an AuditLog: Record
// puts an event on a bounded queue and never blocks; Run drains the queue in
// batches. A slow or failing sink costs dropped (and counted) events, never
// a slower or failed check.
//
// Each retention class (lockstore.AuditClass) has its own queue, so a flood
// of input denials (missing, malformed: anyone can send them) fills only
// its own queue and cannot crowd out a stale or not-held event; stores keep
// the classes within separate budgets for the same reason.
//
// The caller owns the goroutine: start Run, and stop it by cancelling its
// context or calling Close, which flushes what is queued.
type Auditor struct {
	sink     lockstore.AuditLog
	queue    chan lockstore.AuditEvent // decision class
	input    chan lockstore.AuditEvent // input class
	batch    int
	interval time.Duration
	wtimeout time.Duration
	log      *slog.Logger
	dropped  *prometheus.CounterVec

	closed    atomic.Bool
	stop      chan struct{} // closed by Close
	closeOnce sync.Once

	mu      sync.Mutex
	running bool
	done    chan struct{} // closed when Run returns
}

// ErrAuditorRunning is returned by Run when the Auditor is already running.
var ErrAuditorRunning = errors.New("fencecheck: auditor already running")

// ErrAuditorClosed is returned by Run after Close.
var ErrAuditorClosed = errors.New("fencecheck: auditor closed")

// NewAuditor returns an Auditor writing to sink. Start it with Run.
func NewAuditor(sink lockstore.AuditLog, o AuditorOptions) *Auditor {
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultAuditQueueSize
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultAuditBatchSize
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultAuditFlushInterval
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultAuditWriteTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Auditor{
		sink:     sink,
		queue:    make(chan lockstore.AuditEvent, o.QueueSize),
		input:    make(chan lockstore.AuditEvent, o.QueueSize),
		batch:    o.BatchSize,
		interval: o.FlushInterval,
		wtimeout: o.WriteTimeout,
		log:      o.Logger,
		dropped:  newDroppedCounter(o.Registerer),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// Record queues ev for writing on its class's queue. It never blocks: when
// that queue is full, or the Auditor is closed, the event is dropped and
// counted in fencegate_audit_dropped_total{reason,class}.
func (a *Auditor) Record(ev lockstore.AuditEvent) {
	ev = ev.Bounded() // whoever made it: nothing unbounded reaches the store
	class := ev.Class()
	if a.closed.Load() {
		a.dropped.WithLabelValues(dropClosed, class.String()).Inc()
		return
	}
	q := a.queue
	if class == lockstore.AuditInput {
		q = a.input
	}
	select {
	case q <- ev:
	default:
		a.dropped.WithLabelValues(dropQueueFull, class.String()).Inc()
	}
}

// Run writes queued events in batches until ctx is done or Close is called,
// then flushes what is queued (each write still bounded by WriteTimeout) and
// returns nil. It returns an error at once if the Auditor is already running
// or closed.
func (a *Auditor) Run(ctx context.Context) error {
	a.mu.Lock()
	switch {
	case a.closed.Load():
		a.mu.Unlock()
		return ErrAuditorClosed
	case a.running:
		a.mu.Unlock()
		return ErrAuditorRunning
	}
	a.running = true
	a.mu.Unlock()
	defer close(a.done)

	// Writes outlive a cancelled ctx for the final flush; each is bounded
	// by the write timeout instead.
	wctx := context.WithoutCancel(ctx)
	ticker := time.NewTicker(a.interval)
	defer ticker.Stop()
	buf := make([]lockstore.AuditEvent, 0, a.batch)
	for {
		select {
		case ev := <-a.queue:
			buf = append(buf, ev)
			if len(buf) >= a.batch {
				buf = a.write(wctx, buf)
			}
		case ev := <-a.input:
			buf = append(buf, ev)
			if len(buf) >= a.batch {
				buf = a.write(wctx, buf)
			}
		case <-ticker.C:
			buf = a.write(wctx, buf)
		case <-ctx.Done():
			a.drain(wctx, buf)
			return nil
		case <-a.stop:
			a.drain(wctx, buf)
			return nil
		}
	}
}

// Close stops accepting events, lets a running Run flush the queue and
// return, and waits for it; when Run never ran, Close flushes the queue
// itself. It is idempotent.
func (a *Auditor) Close() error {
	a.closeOnce.Do(func() {
		a.mu.Lock()
		a.closed.Store(true)
		running := a.running
		a.mu.Unlock()
		close(a.stop)
		if running {
			<-a.done
		}
		// Whatever is still queued (Run never ran, or a Record raced its
		// last drain) is written here, each batch bounded by WriteTimeout.
		a.drain(context.Background(), make([]lockstore.AuditEvent, 0, a.batch))
	})
	return nil
}

// drain writes buf and everything still queued, in batches.
func (a *Auditor) drain(ctx context.Context, buf []lockstore.AuditEvent) {
	for {
		select {
		case ev := <-a.queue:
			buf = append(buf, ev)
			if len(buf) >= a.batch {
				buf = a.write(ctx, buf)
			}
		case ev := <-a.input:
			buf = append(buf, ev)
			if len(buf) >= a.batch {
				buf = a.write(ctx, buf)
			}
		default:
			a.write(ctx, buf)
			return
		}
	}
}

// write appends buf to the sink and returns buf emptied for reuse. A failed
// write drops its events: retrying would let a broken sink grow the queue
// into the request path's budget.
func (a *Auditor) write(ctx context.Context, buf []lockstore.AuditEvent) []lockstore.AuditEvent {
	if len(buf) == 0 {
		return buf
	}
	wctx, cancel := context.WithTimeout(ctx, a.wtimeout)
	err := a.sink.AppendAudit(wctx, buf)
	cancel()
	if err != nil {
		for _, ev := range buf {
			a.dropped.WithLabelValues(dropWriteFailed, ev.Class().String()).Inc()
		}
		a.log.LogAttrs(ctx, slog.LevelWarn, "fencecheck: audit write failed; events dropped",
			slog.Int("events", len(buf)),
			slog.String("code", string(lockstore.CodeOf(err))),
			slog.Any("error", err))
	}
	// AppendAudit must not retain the slice (it stores copies); reuse it.
	return buf[:0]
}
