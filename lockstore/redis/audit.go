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

// The audit trail is two Redis streams, one per retention class:
// <prefix>.fencegate:audit for decision events and
// <prefix>.fencegate:audit:input for input events (see ownKey), each
// trimmed to its own count, so a flood of input events cannot evict a
// decision event. Entry IDs are stamped by the server clock at insertion,
// which is what trimming by age uses; each entry carries the event's keyHash
// and keyDigest (to filter without decoding) and the event as JSON with
// AuditEvent's field names.
const (
	auditFieldKeyDigest = "keyDigest"
	auditFieldEvent     = "event"
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

// AppendAudit adds events to their class's audit stream, trimming each to
// its retention bounds (approximately: Redis trims whole stream nodes).
func (s *Store) AppendAudit(ctx context.Context, events []lockstore.AuditEvent) error {
	const op = "appendAudit"
	if e := lockstore.ContextError(ctx, op); e != nil {
		return e
	}
	for start := 0; start < len(events); start += auditAppendBatch {
		batch := events[start:min(start+auditAppendBatch, len(events))]
		args := make([]any, 0, 3+4*len(batch))
		args = append(args, s.retention.MaxEventsOf(lockstore.AuditDecision),
			s.retention.MaxEventsOf(lockstore.AuditInput), s.retention.MaxAge.Milliseconds())
		for _, ev := range batch {
			b, err := json.Marshal(ev)
			if err != nil {
				return &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "encoding an audit event", Err: err}
			}
			class := "d"
			if ev.Class() == lockstore.AuditInput {
				class = "i"
			}
			args = append(args, class, ev.KeyHash, ev.KeyDigest, string(b))
		}
		// Each batch goes to the next shard (one under SyncGuard's layout),
		// so no one slot takes every audit write.
		shard := s.audit[int(s.auditNext.Add(1)-1)%len(s.audit)]
		if err := appendAuditScript.Run(ctx, s.client, shard[:], args...).Err(); err != nil {
			return classify(ctx, op, err)
		}
	}
	return nil
}

// QueryAudit returns matching events, newest (by event time) first: the
// best Limit of each class's stream (of every shard's, on a cluster),
// merged. Its work is bounded by Limit per stream, and the streams are a
// fixed number (2, or 2×auditShards).
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
	digest := ""
	if q.Key != "" {
		digest = lockstore.DigestKey(q.Key).String()
	}
	var out []lockstore.AuditEvent
	for _, shard := range s.audit {
		for _, stream := range shard {
			got, err := s.queryStream(ctx, op, stream, digest, q.SinceMs, limit)
			if err != nil {
				return nil, err
			}
			out = append(out, got...)
		}
	}
	if out == nil {
		out = []lockstore.AuditEvent{}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TimeMs > out[j].TimeMs })
	return out[:min(len(out), limit)], nil
}

// queryStream returns the best limit matches of one stream, newest (by
// event time) first.
//
// The stream is in insertion order, which is only roughly event order (the
// audit pipeline queues events before storing them), so it reads newest
// entries first, keeps the best limit matches by event time, and stops once
// the entries left were stored too long before the limit-th match's time
// (more than auditClockSlack) to hold a newer event.
func (s *Store) queryStream(ctx context.Context, op, stream, digest string, sinceMs int64, limit int) ([]lockstore.AuditEvent, error) {
	slack := auditClockSlack.Milliseconds()
	start := "-"
	if sinceMs > 0 {
		start = strconv.FormatInt(max(0, sinceMs-slack), 10)
	}
	end := "+"
	out := []lockstore.AuditEvent{}
	for {
		msgs, err := s.client.XRevRangeN(ctx, stream, end, start, auditPage).Result()
		if err != nil {
			return nil, classify(ctx, op, err)
		}
		for _, m := range msgs {
			// Entries from before keyDigest existed have none: they match
			// no key filter.
			if digest != "" && m.Values[auditFieldKeyDigest] != digest {
				continue
			}
			raw, _ := m.Values[auditFieldEvent].(string)
			var ev lockstore.AuditEvent
			if err := json.Unmarshal([]byte(raw), &ev); err != nil {
				return nil, &lockstore.Error{Code: lockstore.Internal, Op: op,
					Msg: fmt.Sprintf("audit entry %s is not an event", m.ID), Err: err}
			}
			if ev.TimeMs < sinceMs {
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
