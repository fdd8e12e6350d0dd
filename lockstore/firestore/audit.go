package firestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"

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
	KeyDigest  string `firestore:"keyDigest,omitempty"`
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

// inputCollection names the collection of input-class audit events: the
// audit collection's name plus "_input". Each class has its own count
// budget, so input events never evict decision events.
func inputCollection(audit string) string { return audit + "_input" }

// classColl returns the collection of retention class c.
func (s *Store) classColl(c lockstore.AuditClass) *firestore.CollectionRef {
	if c == lockstore.AuditInput {
		return s.input
	}
	return s.audit
}

var auditClasses = []lockstore.AuditClass{lockstore.AuditDecision, lockstore.AuditInput}

// AppendAudit stores events in their class's collection, dropping any
// already past MaxAge and all but the newest budget of one oversized batch,
// then trims each collection it wrote back inside its retention bounds.
// Trimming is best effort: its failure is logged, not returned, because the
// events themselves were stored.
func (s *Store) AppendAudit(ctx context.Context, events []lockstore.AuditEvent) error {
	const op = "appendAudit"
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer cancel()
	ret := s.cfg.AuditRetention
	cutoff := s.nowMs() - ret.MaxAge.Milliseconds()
	keep := map[lockstore.AuditClass][]lockstore.AuditEvent{}
	for _, ev := range events {
		if ev.TimeMs >= cutoff {
			keep[ev.Class()] = append(keep[ev.Class()], ev)
		}
	}
	if len(keep) == 0 {
		return nil
	}

	bw := s.client.BulkWriter(ctx)
	var jobs []*firestore.BulkWriterJob
	var firstErr error
	for _, c := range auditClasses {
		evs := keep[c]
		if n := ret.MaxEventsOf(c); len(evs) > n {
			// Callers append in time order; the tail is the newest.
			evs = evs[len(evs)-n:]
		}
		for _, ev := range evs {
			id, err := auditDocID(ev.TimeMs)
			if err != nil {
				firstErr = err
				break
			}
			job, err := bw.Create(s.classColl(c).Doc(id), toAuditDoc(ev))
			if err != nil {
				firstErr = err
				break
			}
			jobs = append(jobs, job)
		}
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

	for _, c := range auditClasses {
		if len(keep[c]) == 0 {
			continue
		}
		if err := s.trimAudit(ctx, s.classColl(c), ret.MaxEventsOf(c), cutoff); err != nil {
			s.log.Warn("audit retention trim failed; will retry on the next append",
				"class", c.String(), "err", classify(ctx, "trimAudit", err))
		}
	}
	return nil
}

// trimAudit deletes events of coll older than cutoff and, when coll holds
// more than maxEvents, the oldest excess — at most trimBatch of each. Both
// queries use only the automatic single-field index on timeMs.
func (s *Store) trimAudit(ctx context.Context, coll *firestore.CollectionRef, maxEvents int, cutoff int64) error {
	var refs []*firestore.DocumentRef
	old, err := coll.Where("timeMs", "<", cutoff).Select().Limit(trimBatch).Documents(ctx).GetAll()
	if err != nil {
		return err
	}
	for _, d := range old {
		refs = append(refs, d.Ref)
	}

	ar, err := coll.NewAggregationQuery().WithCount("n").Get(ctx)
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
	if excess := cnt.N - int64(len(refs)) - int64(maxEvents); excess > 0 {
		excess = min(excess, trimBatch)
		oldest, err := coll.Where("timeMs", ">=", cutoff).OrderBy("timeMs", firestore.Asc).
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

// QueryAudit returns matching events, newest first: the best Limit of each
// class's collection, merged. Events past MaxAge are never returned, even
// before trimming has caught up.
//
// Without a key the query is a range on timeMs ordered by timeMs (the
// automatic single-field index). With a key it filters on keyDigest and
// needs the composite index (keyDigest ASC, timeMs DESC) on both audit
// collections (see the package doc).
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

	out := make([]lockstore.AuditEvent, 0, limit)
	for _, c := range auditClasses {
		fq := s.classColl(c).Where("timeMs", ">=", since)
		if q.Key != "" {
			fq = fq.Where("keyDigest", "==", lockstore.DigestKey(q.Key).String())
		}
		docs, err := fq.OrderBy("timeMs", firestore.Desc).Limit(limit).Documents(ctx).GetAll()
		if err != nil {
			return nil, classify(ctx, op, err)
		}
		for _, d := range docs {
			var a auditDoc
			if err := d.DataTo(&a); err != nil {
				return nil, &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "audit document does not decode", Err: err}
			}
			out = append(out, fromAuditDoc(a))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TimeMs > out[j].TimeMs })
	return out[:min(len(out), limit)], nil
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
		KeyHash: e.KeyHash, KeyDigest: e.KeyDigest, Key: e.Key, Presented: e.Presented, Current: e.Current,
		Reason: e.Reason, Policy: e.Policy, Mode: e.Mode, Peer: e.Peer, Method: e.Method, Path: e.Path,
	}
}

func fromAuditDoc(a auditDoc) lockstore.AuditEvent {
	return lockstore.AuditEvent{
		TimeMs: a.TimeMs, DecisionID: a.DecisionID, Source: a.Source, Route: a.Route,
		KeyHash: a.KeyHash, KeyDigest: a.KeyDigest, Key: a.Key, Presented: a.Presented, Current: a.Current,
		Reason: a.Reason, Policy: a.Policy, Mode: a.Mode, Peer: a.Peer, Method: a.Method, Path: a.Path,
	}
}
