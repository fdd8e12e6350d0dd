package firestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"cloud.google.com/go/firestore"

	"github.com/fencegate/fencegate/lockstore"
)

// auditDoc is an audit event as stored: lockstore.AuditEvent with the same
// field names as its JSON form.
type auditDoc struct {
	TimeMs     int64  `firestore:"timeMs"`
	DecisionID string `firestore:"decisionId"`
	Source     string `firestore:"source"`
	Route      string `firestore:"route,omitempty"`
	KeyHash    string `firestore:"keyHash"`
	Key        string `firestore:"key,omitempty"`
	Presented  string `firestore:"presented,omitempty"`
	Current    string `firestore:"current,omitempty"`
	Reason     string `firestore:"reason"`
	Policy     string `firestore:"policy"`
	Mode       string `firestore:"mode"`
	Peer       string `firestore:"peer,omitempty"`
	Method     string `firestore:"method,omitempty"`
	Path       string `firestore:"path,omitempty"`
}

// trimBatch bounds the deletes one append spends on retention, so a
// backlog (e.g. after MaxEvents was lowered) drains over several appends
// instead of stalling one.
const trimBatch = 500

// AppendAudit stores events, dropping any already past MaxAge and all but
// the newest MaxEvents of one oversized batch, then trims the collection
// back inside its retention bounds. Trimming is best effort: its failure is
// logged, not returned, because the events themselves were stored.
func (s *Store) AppendAudit(ctx context.Context, events []lockstore.AuditEvent) error {
	const op = "appendAudit"
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer cancel()
	ret := s.cfg.AuditRetention
	cutoff := s.nowMs() - ret.MaxAge.Milliseconds()
	keep := make([]lockstore.AuditEvent, 0, len(events))
	for _, ev := range events {
		if ev.TimeMs >= cutoff {
			keep = append(keep, ev)
		}
	}
	if len(keep) > ret.MaxEvents {
		// Callers append in time order; the tail is the newest.
		keep = keep[len(keep)-ret.MaxEvents:]
	}
	if len(keep) == 0 {
		return nil
	}

	bw := s.client.BulkWriter(ctx)
	jobs := make([]*firestore.BulkWriterJob, 0, len(keep))
	var firstErr error
	for _, ev := range keep {
		id, err := auditDocID(ev.TimeMs)
		if err != nil {
			firstErr = err
			break
		}
		job, err := bw.Create(s.audit.Doc(id), toAuditDoc(ev))
		if err != nil {
			firstErr = err
			break
		}
		jobs = append(jobs, job)
	}
	bw.End() // flushes and waits for every queued write
	for _, j := range jobs {
		if _, err := j.Results(); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return classify(ctx, op, firstErr)
	}

	if err := s.trimAudit(ctx, cutoff); err != nil {
		s.log.Warn("audit retention trim failed; will retry on the next append", "err", classify(ctx, "trimAudit", err))
	}
	return nil
}

// trimAudit deletes events older than cutoff and, when the collection holds
// more than MaxEvents, the oldest excess — at most trimBatch of each. Both
// queries use only the automatic single-field index on timeMs.
func (s *Store) trimAudit(ctx context.Context, cutoff int64) error {
	var refs []*firestore.DocumentRef
	old, err := s.audit.Where("timeMs", "<", cutoff).Select().Limit(trimBatch).Documents(ctx).GetAll()
	if err != nil {
		return err
	}
	for _, d := range old {
		refs = append(refs, d.Ref)
	}

	ar, err := s.audit.NewAggregationQuery().WithCount("n").Get(ctx)
	if err != nil {
		return err
	}
	var cnt struct {
		N int64 `firestore:"n"`
	}
	if err := ar.DataTo(&cnt); err != nil {
		return err
	}
	// The count still includes the aged-out documents deleted below.
	if excess := cnt.N - int64(len(refs)) - int64(s.cfg.AuditRetention.MaxEvents); excess > 0 {
		excess = min(excess, trimBatch)
		oldest, err := s.audit.Where("timeMs", ">=", cutoff).OrderBy("timeMs", firestore.Asc).
			Select().Limit(int(excess)).Documents(ctx).GetAll()
		if err != nil {
			return err
		}
		for _, d := range oldest {
			refs = append(refs, d.Ref)
		}
	}
	if len(refs) == 0 {
		return nil
	}
	bw := s.client.BulkWriter(ctx)
	jobs := make([]*firestore.BulkWriterJob, 0, len(refs))
	for _, r := range refs {
		j, err := bw.Delete(r)
		if err != nil {
			bw.End()
			return err
		}
		jobs = append(jobs, j)
	}
	bw.End()
	for _, j := range jobs {
		if _, err := j.Results(); err != nil {
			return err
		}
	}
	return nil
}

// QueryAudit returns matching events, newest first. Events past MaxAge are
// never returned, even before trimming has caught up.
//
// Without a keyHash the query is a range on timeMs ordered by timeMs (the
// automatic single-field index). With a keyHash it needs the one composite
// index of this package: (keyHash ASC, timeMs DESC) on the audit collection.
func (s *Store) QueryAudit(ctx context.Context, q lockstore.AuditQuery) ([]lockstore.AuditEvent, error) {
	const op = "queryAudit"
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer cancel()
	limit := q.Limit
	if limit <= 0 {
		limit = lockstore.DefaultAuditLimit
	}
	limit = min(limit, lockstore.MaxAuditLimit)
	since := max(q.SinceMs, s.nowMs()-s.cfg.AuditRetention.MaxAge.Milliseconds())

	fq := s.audit.Where("timeMs", ">=", since)
	if q.KeyHash != "" {
		fq = fq.Where("keyHash", "==", q.KeyHash)
	}
	docs, err := fq.OrderBy("timeMs", firestore.Desc).Limit(limit).Documents(ctx).GetAll()
	if err != nil {
		return nil, classify(ctx, op, err)
	}
	out := make([]lockstore.AuditEvent, 0, len(docs))
	for _, d := range docs {
		var a auditDoc
		if err := d.DataTo(&a); err != nil {
			return nil, &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "audit document does not decode", Err: err}
		}
		out = append(out, fromAuditDoc(a))
	}
	return out, nil
}

// auditDocID names an audit document by its time and 64 random bits: unique
// without coordination, and sorted by time in the console.
func auditDocID(timeMs int64) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", &lockstore.Error{Code: lockstore.Internal, Op: "appendAudit", Msg: "crypto/rand failed", Err: err}
	}
	return fmt.Sprintf("%015d-%s", max(timeMs, 0), hex.EncodeToString(b[:])), nil
}

func toAuditDoc(e lockstore.AuditEvent) auditDoc {
	return auditDoc{
		TimeMs: e.TimeMs, DecisionID: e.DecisionID, Source: e.Source, Route: e.Route,
		KeyHash: e.KeyHash, Key: e.Key, Presented: e.Presented, Current: e.Current,
		Reason: e.Reason, Policy: e.Policy, Mode: e.Mode, Peer: e.Peer, Method: e.Method, Path: e.Path,
	}
}

func fromAuditDoc(a auditDoc) lockstore.AuditEvent {
	return lockstore.AuditEvent{
		TimeMs: a.TimeMs, DecisionID: a.DecisionID, Source: a.Source, Route: a.Route,
		KeyHash: a.KeyHash, Key: a.Key, Presented: a.Presented, Current: a.Current,
		Reason: a.Reason, Policy: a.Policy, Mode: a.Mode, Peer: a.Peer, Method: a.Method, Path: a.Path,
	}
}
