package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/lockstore"
)

// runAudit lists audit events (denials and dry-run would-denies), newest
// first, one JSON object per line; with --follow it keeps polling and
// prints new events oldest first as they arrive, like tail -f.
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("audit", "")
	var cf clientFlags
	cf.register(fs)
	key := fs.String("key", "", "only events for this key")
	since := fs.Duration("since", time.Hour, "only events newer than this")
	limit := fs.Int("limit", 100, "at most this many events per query")
	follow := fs.Bool("follow", false, "keep polling for new events")
	every := fs.Duration("interval", 2*time.Second, "with --follow, how often to poll")
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	c, err := cf.client()
	if err != nil {
		fmt.Fprintln(stderr, "fencegate audit:", err)
		return exitUsage
	}
	enc := json.NewEncoder(stdout)
	q := client.AuditQuery{Key: *key, Since: time.Now().Add(-*since), Limit: *limit}

	query := func() ([]lockstore.AuditEvent, error) {
		qctx, cancel := context.WithTimeout(ctx, cf.timeout)
		defer cancel()
		return c.Audit(qctx, q)
	}
	events, err := query()
	if err != nil {
		return fail(stderr, "audit", err)
	}
	if !*follow {
		for _, ev := range events {
			_ = enc.Encode(ev)
		}
		return exitOK
	}
	// Follow: print oldest first, then only what is new. Events in the same
	// millisecond are told apart by decision id.
	seen := map[string]bool{}
	emit := func(evs []lockstore.AuditEvent) {
		for i := len(evs) - 1; i >= 0; i-- {
			ev := evs[i]
			if seen[ev.DecisionID] {
				continue
			}
			seen[ev.DecisionID] = true
			_ = enc.Encode(ev)
			if ev.TimeMs > q.Since.UnixMilli() {
				q.Since = time.UnixMilli(ev.TimeMs)
			}
		}
	}
	emit(events)
	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return exitOK
		case <-t.C:
		}
		evs, err := query()
		if err != nil {
			if ctx.Err() != nil {
				return exitOK
			}
			fmt.Fprintln(stderr, "fencegate audit:", err)
			continue
		}
		emit(evs)
	}
}
