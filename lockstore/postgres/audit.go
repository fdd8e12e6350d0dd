package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lockstore"
)

// auditPruneEvery is how many appended events trigger a retention pass. The
// pass rides in the same round trip as the insert that crosses the mark, so
// retention costs no extra trip, and at one pass per 256 events the table
// overshoots MaxEvents by at most that many rows per gateway.
const auditPruneEvery = 256

// AppendAudit stores events in one multi-row INSERT (unnest of four
// arrays). Every auditPruneEvery events, and on a store's first append, the
// same batch also deletes events older than Retention.MaxAge and, per
// retention class, beyond that class's newest MaxEventsOf. One round trip
// either way.
func (s *Store) AppendAudit(ctx context.Context, events []lockstore.AuditEvent) error {
	const op = "appendAudit"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	times := make([]int64, len(events))
	hashes := make([]string, len(events))
	docs := make([]string, len(events))
	inputs := make([]bool, len(events))
	now := time.Now().UnixMilli()
	for i, ev := range events {
		if ev.TimeMs <= 0 {
			ev.TimeMs = now
		}
		doc, err := json.Marshal(ev)
		if err != nil {
			return &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "audit event does not encode", Err: err}
		}
		times[i], hashes[i], docs[i] = ev.TimeMs, ev.KeyHash, string(doc)
		inputs[i] = ev.Class() == lockstore.AuditInput
	}

	b := &pgx.Batch{}
	b.Queue(s.sql.auditInsert, times, hashes, docs, inputs)
	before := s.auditSincePrune.Add(int64(len(events))) - int64(len(events))
	prune := before == 0 || before/auditPruneEvery != (before+int64(len(events)))/auditPruneEvery
	if prune {
		b.Queue(s.sql.auditPruneAge, s.cfg.AuditRetention.MaxAge.Milliseconds())
		b.Queue(s.sql.auditPruneCount, s.cfg.AuditRetention.MaxEventsOf(lockstore.AuditDecision), false)
		b.Queue(s.sql.auditPruneCount, s.cfg.AuditRetention.MaxEventsOf(lockstore.AuditInput), true)
	}
	// One pipeline with one Sync: insert and prune commit together.
	return classify(ctx, op, s.pool.SendBatch(ctx, b).Close())
}

// QueryAudit returns matching events, newest first by event time. One round
// trip; a key filter narrows by the (key_hash, time_ms) index and matches
// the event's keyDigest.
func (s *Store) QueryAudit(ctx context.Context, q lockstore.AuditQuery) ([]lockstore.AuditEvent, error) {
	const op = "queryAudit"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = lockstore.DefaultAuditLimit
	case limit > lockstore.MaxAuditLimit:
		limit = lockstore.MaxAuditLimit
	}
	var rows pgx.Rows
	var err error
	if q.Key != "" {
		rows, err = s.pool.Query(ctx, s.sql.auditQueryKey, q.SinceMs, limit,
			lockstore.HashKey(q.Key), lockstore.DigestKey(q.Key).String())
	} else {
		rows, err = s.pool.Query(ctx, s.sql.auditQuery, q.SinceMs, limit)
	}
	if err != nil {
		return nil, classify(ctx, op, err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (lockstore.AuditEvent, error) {
		var ev lockstore.AuditEvent
		err := row.Scan(&ev) // jsonb into the struct via encoding/json
		return ev, err
	})
	if err != nil {
		return nil, classify(ctx, op, err)
	}
	return events, nil
}
