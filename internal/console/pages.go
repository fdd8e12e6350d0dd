package console

import (
	"bytes"
	"context"
	"embed"
	"html/template"
	"net/http"
	"strings"

	"github.com/fencegate/fencegate/lockstore"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

var pages = template.Must(template.New("").ParseFS(templateFS, "templates/*.html"))

// page is what every template gets.
type page struct {
	Title     string
	Backend   string
	NowMs     int64
	Auth      bool
	Session   bool
	Who       string
	RawKeys   bool
	Error     string
	StreamURL string // the event stream this page listens to ("" for none)
	KeyHash   string // the timeline's key (reloads on its denials)

	ShowLocks   bool
	Locks       []lockRow
	LocksErr    string
	Partial     bool
	ShowDenials bool
	Denials     []denialRow
	DenialsErr  string

	// Timeline.
	Key         string // the key as shown
	Held        *lockRow
	LatestFence string
	Entries     []entry
}

func (c *Console) basePage(v viewer, title string) page {
	p := page{
		Title: title, Backend: c.store.Capabilities().Backend, NowMs: c.now().UnixMilli(),
		Auth: c.auth != nil, Session: v.sessionID != "", RawKeys: c.rawKeys,
		ShowLocks: v.canLocks(), ShowDenials: v.canDenials(),
	}
	if v.p != nil {
		p.Who = v.p.Name
	}
	return p
}

func (c *Console) render(w http.ResponseWriter, status int, name string, p page) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, p); err != nil {
		c.log.Error("console: rendering a page", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (c *Console) renderLogin(w http.ResponseWriter, status int, msg string) {
	p := page{Title: "Log in", Backend: c.store.Capabilities().Backend, Auth: true, Error: msg}
	c.render(w, status, "login.html", p)
}

// gate resolves the viewer or answers with the login page.
func (c *Console) gate(w http.ResponseWriter, r *http.Request) (viewer, bool) {
	v, status, err := c.resolve(r)
	if err != nil {
		c.renderLogin(w, status, err.Error())
		return v, false
	}
	return v, true
}

// overview is the console's front page: live locks and recent denials.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	v, ok := c.gate(w, r)
	if !ok {
		return
	}
	p := c.basePage(v, "fencegate console")
	p.StreamURL = Path + "/events"
	if p.ShowLocks {
		l, err := c.listing(r.Context())
		if err != nil {
			p.LocksErr = "live locks unavailable: " + err.Error()
		} else {
			p.Locks, p.Partial, p.NowMs = c.lockRows(v, l), l.Partial, l.NowMs
		}
	}
	if p.ShowDenials {
		evs, err := c.queryAudit(r.Context(), lockstore.AuditQuery{Limit: denialsShown * 4})
		if err != nil {
			p.DenialsErr = "denials unavailable: " + err.Error()
		}
		for _, ev := range evs {
			if len(p.Denials) < denialsShown && v.seesDenial(ev) {
				p.Denials = append(p.Denials, c.denialRow(v, ev))
			}
		}
	}
	c.render(w, http.StatusOK, "overview.html", p)
}

func (c *Console) queryAudit(ctx context.Context, q lockstore.AuditQuery) ([]lockstore.AuditEvent, error) {
	if c.audit == nil {
		return nil, nil
	}
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	return c.audit.QueryAudit(rctx, q)
}

// timeline shows one key: the live lock, the latest fence, and the fence
// history this console can see. The key is named raw (?key=, authorised by
// the viewer's prefixes) or by hash (?hash=, for viewers of every key).
func (c *Console) timeline(w http.ResponseWriter, r *http.Request) {
	v, ok := c.gate(w, r)
	if !ok {
		return
	}
	p := c.basePage(v, "Fence timeline")
	if !v.canLocks() {
		p.Error = "this token lacks the lookup operation, which a timeline needs"
		c.render(w, http.StatusForbidden, "timeline.html", p)
		return
	}
	var raw, hash string
	switch q := r.URL.Query(); {
	case q.Get("key") != "":
		nk, err := lockstore.NormalizeKey(q.Get("key"))
		if err != nil {
			p.Error = "that key is not valid: " + err.Error()
			c.render(w, http.StatusBadRequest, "timeline.html", p)
			return
		}
		if !v.seesKey(nk) {
			p.Error = "this token's key prefixes do not cover that key"
			c.render(w, http.StatusForbidden, "timeline.html", p)
			return
		}
		raw, hash = nk, lockstore.HashKey(nk)
		p.Key = nk // the viewer typed it
	case q.Get("hash") != "":
		hash = strings.ToLower(q.Get("hash"))
		if !v.allKeys() {
			p.Error = "a token limited to key prefixes opens timelines by key, not by hash"
			c.render(w, http.StatusForbidden, "timeline.html", p)
			return
		}
		p.Key = hash
	default:
		http.Redirect(w, r, Path, http.StatusSeeOther)
		return
	}
	p.KeyHash = hash
	p.StreamURL = Path + "/events?locks=0"

	// The current state: Inspect when the raw key is known (it also gives
	// the latest fence ever issued), else the listing.
	if raw != "" {
		ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
		ks, err := c.store.Inspect(ctx, raw)
		cancel()
		if err != nil {
			p.LocksErr = "the key's state is unavailable: " + err.Error()
		} else {
			p.NowMs, p.LatestFence = ks.NowMs, ks.LatestFence
			if ks.Live != nil {
				p.Held = &lockRow{
					Fence: ks.Live.Fence, LockIDHash: lockstore.HashKey(ks.Live.LockID), ExpiresAtMs: ks.Live.ExpiresAtMs,
					ExpiresIn: fmtRemaining(ks.Live.ExpiresAtMs, ks.NowMs), AcquiredAt: fmtTime(ks.Live.AcquiredAtMs),
				}
			}
		}
	} else if l, err := c.listing(r.Context()); err != nil {
		p.LocksErr = "live locks unavailable: " + err.Error()
	} else {
		p.NowMs = l.NowMs
		for _, row := range c.lockRows(v, l) {
			if row.KeyHash == hash {
				p.Held = &row
			}
		}
	}

	ops := c.rec.ops(func(op lockOp) bool { return op.KeyHash == hash && (raw == "" || op.Key == raw) })
	var denials []lockstore.AuditEvent
	if v.canDenials() {
		// By raw key the store filters on the key's SHA-256 digest. A
		// timeline opened by hash (only an all-keys viewer can) filters
		// the newest events here instead: the audit log has no hashKey
		// filter, since hashKey collides cheaply (for such a viewer a
		// collision shows nothing it could not see anyway).
		q := lockstore.AuditQuery{Key: raw, Limit: timelineLimit}
		if raw == "" {
			q = lockstore.AuditQuery{Limit: timelineScanLimit}
		}
		evs, err := c.queryAudit(r.Context(), q)
		if err != nil {
			p.DenialsErr = "denials unavailable: " + err.Error()
		}
		for _, ev := range evs {
			if ev.KeyHash != hash {
				continue
			}
			// By raw key, the hash alone could collide with another key.
			if raw == "" || ev.Key == "" || ev.Key == raw {
				denials = append(denials, ev)
			}
		}
	}
	p.Entries = timelineEntries(ops, denials, c.now().UnixMilli())
	c.render(w, http.StatusOK, "timeline.html", p)
}

// serveStatic serves the embedded script and stylesheet.
func serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := staticFS.ReadFile("static/" + name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	switch {
	case strings.HasSuffix(name, ".js"):
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".css"):
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case strings.HasSuffix(name, ".svg"):
		w.Header().Set("Content-Type", "image/svg+xml")
	}
	_, _ = w.Write(b)
}
