package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Event stream bounds.
const (
	// lookBehind is the window each poll reads: the auditor appends events
	// in batches, so an event stamped earlier can land after a later one
	// was already read. Decision ids de-duplicate what is read twice. A
	// burst of more than pollLimit denials in one window shows the newest.
	lookBehind = 10 * time.Second
	pollLimit  = 200
)

// events is the Server-Sent Events feed of a page: "denial" events as the
// audit log receives them (polled every pollInterval with a since filter,
// so every gateway's denials arrive), and, unless locks=0, a "locks"
// snapshot every locksInterval. It ends when the client goes, or when the
// console's context ends (shutdown).
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	v, status, err := c.resolve(r)
	if err != nil {
		http.Error(w, err.Error(), status)
		return
	}
	if !v.canLocks() && !v.canDenials() {
		// Nothing to stream: the slot would be held for nothing.
		http.Error(w, "this token may see neither locks (lookup) nor denials (audit)", http.StatusForbidden)
		return
	}
	rc := http.NewResponseController(w)
	if !c.streams.take(v.name()) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many console streams", http.StatusServiceUnavailable)
		return
	}
	defer c.streams.give(v.name())

	since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
	if since <= 0 {
		since = c.now().Add(-lookBehind).UnixMilli()
	}
	withLocks := r.URL.Query().Get("locks") != "0" && v.canLocks()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// The retry hint keeps reconnects calm after a restart.
	if _, err := fmt.Fprint(w, "retry: 3000\n\n"); err != nil {
		return
	}
	_ = rc.Flush()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()

	seen := map[string]int64{} // decision id → event time, for de-duplication
	var lastLocks time.Time
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if v.canDenials() {
			evs, err := c.queryAudit(ctx, lockstore.AuditQuery{SinceMs: since, Limit: pollLimit})
			if err != nil && ctx.Err() == nil {
				c.log.Debug("console: polling the audit log", "err", err)
			}
			// Newest first from the store; send oldest first.
			for i := len(evs) - 1; i >= 0; i-- {
				ev := evs[i]
				if _, dup := seen[ev.DecisionID]; dup || !v.seesDenial(ev) {
					continue
				}
				seen[ev.DecisionID] = ev.TimeMs
				if err := send(w, "denial", c.denialRow(v, ev)); err != nil {
					return
				}
			}
			// Each later poll reads the last lookBehind again.
			since = max(since, c.now().Add(-lookBehind).UnixMilli())
			for id, t := range seen {
				if t < since {
					delete(seen, id)
				}
			}
		}
		if withLocks && c.now().Sub(lastLocks) >= locksInterval {
			lastLocks = c.now()
			if l, err := c.listing(ctx); err == nil {
				if err := send(w, "locks", locksEvent{NowMs: l.NowMs, Partial: l.Partial, Locks: c.lockRows(v, l)}); err != nil {
					return
				}
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

type locksEvent struct {
	NowMs   int64     `json:"nowMs"`
	Partial bool      `json:"partial"`
	Locks   []lockRow `json:"locks"`
}

// send writes one SSE event. JSON never contains a raw newline, so one
// data line carries it.
func send(w http.ResponseWriter, event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	return err
}
