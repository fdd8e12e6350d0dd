package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// The audit trail is a Redis stream at <prefix>:audit. Entry IDs are stamped
// by the server clock at insertion, which is what trimming by age uses;
// each entry carries the event's keyHash (to filter without decoding) and the
// event as JSON with AuditEvent's field names.
const (
	auditFieldKeyHash = "keyHash"
	auditFieldEvent   = "event"
	// auditAppendBatch bounds one script call, so a large batch cannot hold
	// the server for long.
	auditAppendBatch = 500
	// auditPage is how many entries one XREVRANGE reads while filtering.
	auditPage = 500
	// auditClockSlack: events are stored after they happen, so an entry
	// stamped before since-slack cannot hold an event at or after since,
	// unless the gateway's clock and Redis's disagree by more than this.
	auditClockSlack = 5 * time.Minute
)

// AppendAudit adds events to the audit stream, trimming it to the retention
// bounds (approximately: Redis trims whole stream nodes).
func (s *Store) AppendAudit(ctx context.Context, events []lockstore.AuditEvent) error {
	const op = "appendAudit"
	if e := lockstore.ContextError(ctx, op); e != nil {
		return e
	}
	for start := 0; start < len(events); start += auditAppendBatch {
		batch := events[start:min(start+auditAppendBatch, len(events))]
		args := make([]any, 0, 2+2*len(batch))
		args = append(args, s.retention.MaxEvents, s.retention.MaxAge.Milliseconds())
		for _, ev := range batch {
			b, err := json.Marshal(ev)
			if err != nil {
				return &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "encoding an audit event", Err: err}
			}
			args = append(args, ev.KeyHash, string(b))
		}
		if err := appendAuditScript.Run(ctx, s.client, []string{s.auditKey}, args...).Err(); err != nil {
			return classify(ctx, op, err)
		}
	}
	return nil
}

// QueryAudit returns matching events, newest (by event time) first.
//
// The stream is in insertion order, which is only roughly event order (the
// audit pipeline queues events before storing them), so QueryAudit reads
// newest entries first, keeps the best Limit matches by event time, and
// stops once the entries left were stored too long before the Limit-th
// match's time (more than auditClockSlack) to hold a newer event.
func (s *Store) QueryAudit(ctx context.Context, q lockstore.AuditQuery) ([]lockstore.AuditEvent, error) {
	const op = "queryAudit"
	limit := q.Limit
	if limit <= 0 {
		limit = lockstore.DefaultAuditLimit
	}
	limit = min(limit, lockstore.MaxAuditLimit)
	if e := lockstore.ContextError(ctx, op); e != nil {
		return nil, e
	}
	slack := auditClockSlack.Milliseconds()
	start := "-"
	if q.SinceMs > 0 {
		start = strconv.FormatInt(max(0, q.SinceMs-slack), 10)
	}
	end := "+"
	out := []lockstore.AuditEvent{}
	for {
		msgs, err := s.client.XRevRangeN(ctx, s.auditKey, end, start, auditPage).Result()
		if err != nil {
			return nil, classify(ctx, op, err)
		}
		for _, m := range msgs {
			if q.KeyHash != "" && m.Values[auditFieldKeyHash] != q.KeyHash {
				continue
			}
			raw, _ := m.Values[auditFieldEvent].(string)
			var ev lockstore.AuditEvent
			if err := json.Unmarshal([]byte(raw), &ev); err != nil {
				return nil, &lockstore.Error{Code: lockstore.Internal, Op: op,
					Msg: fmt.Sprintf("audit entry %s is not an event", m.ID), Err: err}
			}
			if ev.TimeMs < q.SinceMs {
				continue
			}
			out = append(out, ev)
		}
		// Stable: equal times keep the newest-stored first.
		sort.SliceStable(out, func(i, j int) bool { return out[i].TimeMs > out[j].TimeMs })
		if len(out) > limit {
			out = out[:limit]
		}
		if len(msgs) < auditPage {
			return out, nil
		}
		last := msgs[len(msgs)-1].ID
		if len(out) == limit {
			if ms, ok := streamIDMs(last); ok && ms+slack < out[limit-1].TimeMs {
				return out, nil
			}
		}
		end = "(" + last
	}
}

// streamIDMs returns the millisecond part of a stream entry ID.
func streamIDMs(id string) (int64, bool) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	return n, err == nil
}
