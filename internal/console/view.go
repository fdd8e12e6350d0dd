package console

import (
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// lockRow is a live lock as a page or the event stream shows it.
type lockRow struct {
	Key         string `json:"key"` // the raw key, or its hash when raw keys are off
	KeyHash     string `json:"keyHash"`
	Link        string `json:"link,omitempty"` // the key's timeline, when the viewer may open it
	Fence       string `json:"fence"`
	LockIDHash  string `json:"lockIdHash"`
	ExpiresAtMs int64  `json:"expiresAtMs"`
	ExpiresIn   string `json:"expiresIn"`
	AcquiredAt  string `json:"acquiredAt"`
}

// denialRow is a denial as a page or the event stream shows it.
type denialRow struct {
	TimeMs     int64  `json:"timeMs"`
	Time       string `json:"time"`
	DecisionID string `json:"decisionId"`
	Reason     string `json:"reason"`
	Presented  string `json:"presented"`
	Current    string `json:"current"`
	Route      string `json:"route"`
	Request    string `json:"request"` // method and path
	Peer       string `json:"peer"`
	Mode       string `json:"mode"`
	Source     string `json:"source"`
	Key        string `json:"key"`
	KeyHash    string `json:"keyHash"`
	Link       string `json:"link,omitempty"`
}

// entry is one line of a key's timeline.
type entry struct {
	TimeMs int64
	Time   string
	Kind   string // acquire, extend, release, expiry, denial
	Fence  string
	Detail string
	Source string // where the console learned it
	ID     string // a denial's decision id
}

// Sources of timeline entries, as the page labels them.
const (
	sourceGateway  = "this gateway"
	sourceInferred = "this gateway (inferred)"
	sourceAudit    = "audit log (all gateways)"
)

func fmtTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000Z")
}

func fmtRemaining(expiresAtMs, nowMs int64) string {
	d := time.Duration(expiresAtMs-nowMs) * time.Millisecond
	if d <= 0 {
		return "expired"
	}
	return d.Round(100 * time.Millisecond).String()
}

// keyShown is the form of a key the viewer sees: raw when raw keys are on
// and the raw key is known, else its hash.
func (c *Console) keyShown(raw, hash string) string {
	if c.rawKeys && raw != "" {
		return raw
	}
	return hash
}

// link is the timeline URL of a key, or "" when this viewer cannot open
// it: by raw key when raw keys are on, by hash for a viewer of all keys.
func (c *Console) link(v viewer, raw, hash string) string {
	if c.rawKeys && raw != "" {
		return Path + "/key?key=" + url.QueryEscape(raw)
	}
	if v.allKeys() && hash != "" {
		return Path + "/key?hash=" + url.QueryEscape(hash)
	}
	return ""
}

func (c *Console) lockRows(v viewer, l lockstore.LockList) []lockRow {
	rows := make([]lockRow, 0, len(l.Locks))
	for _, lk := range l.Locks {
		if !v.seesKey(lk.Key) {
			continue
		}
		rows = append(rows, lockRow{
			Key: c.keyShown(lk.Key, lk.KeyHash), KeyHash: lk.KeyHash, Link: c.link(v, lk.Key, lk.KeyHash),
			Fence: lk.Fence, LockIDHash: lk.LockIDHash, ExpiresAtMs: lk.ExpiresAtMs,
			ExpiresIn: fmtRemaining(lk.ExpiresAtMs, l.NowMs), AcquiredAt: fmtTime(lk.AcquiredAtMs),
		})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Key != rows[j].Key {
			return rows[i].Key < rows[j].Key
		}
		return rows[i].Fence < rows[j].Fence
	})
	return rows
}

func (c *Console) denialRow(v viewer, ev lockstore.AuditEvent) denialRow {
	return denialRow{
		TimeMs: ev.TimeMs, Time: fmtTime(ev.TimeMs), DecisionID: ev.DecisionID, Reason: ev.Reason,
		Presented: ev.Presented, Current: ev.Current, Route: ev.Route,
		Request: strings.TrimSpace(ev.Method + " " + ev.Path), Peer: ev.Peer, Mode: ev.Mode, Source: ev.Source,
		Key: c.keyShown(ev.Key, ev.KeyHash), KeyHash: ev.KeyHash, Link: c.link(v, ev.Key, ev.KeyHash),
	}
}

// denialDetail says in words why a denial happened.
func denialDetail(ev lockstore.AuditEvent) string {
	var b strings.Builder
	b.WriteString(ev.Reason)
	if ev.Presented != "" || ev.Current != "" {
		b.WriteString(": presented fence ")
		b.WriteString(orNone(ev.Presented))
		b.WriteString(", current fence ")
		b.WriteString(orNone(ev.Current))
	}
	if ev.Mode != "" && ev.Mode != "enforce" {
		b.WriteString(" (" + ev.Mode + ")")
	}
	if r := strings.TrimSpace(ev.Method + " " + ev.Path); r != "" {
		b.WriteString("; " + r)
	}
	if ev.Route != "" {
		b.WriteString(" via route " + ev.Route)
	}
	if ev.Peer != "" {
		b.WriteString(" from " + ev.Peer)
	}
	b.WriteString("; decision " + ev.DecisionID)
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// timelineEntries merges this gateway's lock operations on a key, the
// expiries they imply, and the key's denials, newest first.
func timelineEntries(ops []lockOp, denials []lockstore.AuditEvent, nowMs int64) []entry {
	var out []entry
	type holding struct {
		fence      string
		expiresAt  int64
		released   bool
		lockIDHash string
	}
	held := map[string]*holding{}
	var order []string
	for _, op := range ops {
		e := entry{TimeMs: op.TimeMs, Time: fmtTime(op.TimeMs), Kind: op.Kind, Fence: op.Fence, Source: sourceGateway}
		switch op.Kind {
		case opAcquire:
			e.Detail = "acquired by lockId hash " + op.LockIDHash + ", expires " + fmtTime(op.ExpiresAtMs)
			held[op.LockIDHash] = &holding{fence: op.Fence, expiresAt: op.ExpiresAtMs, lockIDHash: op.LockIDHash}
			order = append(order, op.LockIDHash)
		case opExtend:
			e.Detail = "extended by lockId hash " + op.LockIDHash + " to " + fmtTime(op.ExpiresAtMs)
			if h := held[op.LockIDHash]; h != nil {
				h.expiresAt = op.ExpiresAtMs
			}
		case opRelease:
			e.Detail = "released by lockId hash " + op.LockIDHash
			if h := held[op.LockIDHash]; h != nil {
				h.released = true
			}
		}
		out = append(out, e)
	}
	for _, id := range order {
		h := held[id]
		if h.released || !(h.expiresAt+lockstore.TimeToleranceMs < nowMs) {
			continue
		}
		out = append(out, entry{
			TimeMs: h.expiresAt, Time: fmtTime(h.expiresAt), Kind: "expiry", Fence: h.fence, Source: sourceInferred,
			Detail: "lockId hash " + h.lockIDHash + " expired without a release this gateway served",
		})
	}
	for _, ev := range denials {
		fence := ev.Presented
		out = append(out, entry{
			TimeMs: ev.TimeMs, Time: fmtTime(ev.TimeMs), Kind: "denial", Fence: fence,
			Detail: denialDetail(ev), Source: sourceAudit, ID: ev.DecisionID,
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TimeMs > out[j].TimeMs })
	return out
}
